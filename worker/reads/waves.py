"""Each wave of a run: where it stands, when it ran, and its dollars split by token kind."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from worker.errors import ConfigError
from worker.models.pricing import PriceTable
from worker.states import WaveStatus
from worker.store.tables import sessions, usage, waves

__all__ = ["TOKEN_KINDS", "WaveFigures", "split_cost", "wave_figures"]

#: Token kinds as reports name them, and their ``usage`` columns (the fields of
#: :class:`~worker.models.base.TokenUsage`).
TOKEN_KINDS = {
    "prompt": "prompt_tokens",
    "cached": "cached_tokens",
    "output": "output_tokens",
    "thoughts": "thoughts_tokens",
    "tool_use": "tool_use_tokens",
}


@dataclass(frozen=True)
class WaveFigures:
    """One wave: its state, its time span and its dollars, split by token kind."""

    index: int
    size: int
    status: WaveStatus
    done: int
    """Sessions of the wave that ended."""
    started_at: datetime | None
    finished_at: datetime | None
    cost_usd: float
    cost_by_kind_usd: dict[str, float]
    """The wave's recorded dollars apportioned by what each token kind costs."""


def wave_figures(conn: Connection, run_id: int, *, prices: PriceTable) -> list[WaveFigures]:
    """The run's waves in order, each with its dollars split by token kind."""
    rows = conn.execute(
        select(
            waves.c.id,
            waves.c.index.label("wave_index"),
            waves.c.size,
            waves.c.status,
            waves.c.done_count,
            waves.c.started_at,
            waves.c.finished_at,
        )
        .where(waves.c.run_id == run_id)
        .order_by(waves.c.index)
    ).all()
    spent = conn.execute(
        select(
            sessions.c.wave_id,
            usage.c.model,
            func.sum(usage.c.cost_usd),
            *[func.sum(usage.c[c]) for c in TOKEN_KINDS.values()],
        )
        .join_from(usage, sessions, usage.c.session_id == sessions.c.id)
        .where(sessions.c.run_id == run_id)
        .group_by(sessions.c.wave_id, usage.c.model)
    ).all()
    by_wave: dict[int, list[tuple[str, float, dict[str, int]]]] = {}
    for wave_id, model, cost, *sums in spent:
        by_wave.setdefault(wave_id, []).append(
            (model, float(cost), dict(zip(TOKEN_KINDS, map(int, sums), strict=True)))
        )
    result = []
    for w in rows:
        parts: dict[str, float] = {}
        for model, cost, tokens in by_wave.get(w.id, []):
            for kind, dollars in split_cost(cost, tokens, prices, model).items():
                parts[kind] = parts.get(kind, 0.0) + dollars
        result.append(
            WaveFigures(
                index=w.wave_index,
                size=w.size,
                status=WaveStatus(w.status),
                done=w.done_count,
                started_at=w.started_at,
                finished_at=w.finished_at,
                cost_usd=math.fsum(c for _, c, _ in by_wave.get(w.id, [])),
                cost_by_kind_usd=parts,
            )
        )
    return result


def split_cost(
    cost_usd: float, tokens: Mapping[str, int], prices: PriceTable, model: str
) -> dict[str, float]:
    """Apportion recorded dollars to token kinds by what each kind costs.

    The recorded dollars stay the truth (prices may have changed since); the price table only
    sets the shares. Tool-use prompt tokens are billed as input, thoughts as output. Dollars of
    a model without a price, or of calls without tokens, stay ``unpriced``.
    """
    try:
        p = prices.price(model)
    except ConfigError:
        p = None
    weights = (
        {}
        if p is None
        else {
            "uncached_prompt": max(tokens["prompt"] - tokens["cached"], 0) * p.input_per_m,
            "cached_prompt": tokens["cached"] * p.cached_input_per_m,
            "tool_use": tokens["tool_use"] * p.input_per_m,
            "output": tokens["output"] * p.output_per_m,
            "thoughts": tokens["thoughts"] * p.output_per_m,
        }
    )
    total = math.fsum(weights.values())
    if total <= 0:
        return {"unpriced": cost_usd} if cost_usd else {}
    return {kind: cost_usd * w / total for kind, w in weights.items()}
