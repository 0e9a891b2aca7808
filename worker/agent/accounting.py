"""What a committed turn is accounted as: its usage row, and what the process's observer
(the worker's metrics) is told about it."""

from __future__ import annotations

from typing import Any

from worker.agent.timings import OVERHEAD_PHASES, PHASES, TurnTimer
from worker.fleet.runtime import TurnObserver
from worker.models.base import TokenUsage
from worker.models.pricing import PriceTable

__all__ = ["observe_commit", "usage_row"]


def usage_row(
    prices: PriceTable, model: str, usage: TokenUsage, cost_usd: float, timer: TurnTimer
) -> dict[str, Any]:
    """The columns of a model call's usage row (``worker.store.tables.usage``)."""
    return {
        "model": model,
        "prompt_tokens": usage.prompt_tokens,
        "cached_tokens": usage.cached_tokens,
        "output_tokens": usage.output_tokens,
        "thoughts_tokens": usage.thoughts_tokens,
        "tool_use_tokens": usage.tool_use_tokens,
        "cost_usd": cost_usd,
        "price_date": prices.price(model).as_of,
        "latency_ms": int(timer.ms("model")),
    }


def observe_commit(
    observer: TurnObserver, model: str, timing: dict[str, Any], usage: TokenUsage, cost_usd: float
) -> None:
    """Tell ``observer`` what a committed turn took: phases, CPU, tokens by kind, dollars."""
    phases = {p: timing[f"{p}_ms"] for p in PHASES}
    phases["overhead"] = sum(ms or 0.0 for p, ms in phases.items() if p in OVERHEAD_PHASES)
    observer.after_commit(
        model=model,
        phases_ms=phases,
        cpu_ms=timing["cpu_ms"],
        tokens={
            "prompt": usage.prompt_tokens,
            "cached": usage.cached_tokens,
            "output": usage.output_tokens,
            "thoughts": usage.thoughts_tokens,
            "tool_use": usage.tool_use_tokens,
        },
        cost_usd=cost_usd,
    )
