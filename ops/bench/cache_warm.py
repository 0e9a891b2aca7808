# ruff: noqa: T201
"""What cache-warm dispatch saves: a Gemini run's first turns, warm against cold.

For each mode (``--cache-warm on``, then ``off``: the baseline) and each repetition: a fresh
PostgreSQL database, a flushed Redis db, a fresh fake Gemini API (its implicit cache
empty) and a real worker (``python -m worker``) whose ``google-genai`` client points at it;
one run on a Gemini model with the same seed, followed to its end. It prints, per mode,
the cache share of the first turns (cached / prompt tokens of turn 0 of every session),
their dollars and the run's dollars, then the medians and the warm/cold ratios.

    python -m ops.bench.cache_warm                        # 2x10 on gemini-3-flash-preview, 3 reps
    python -m ops.bench.cache_warm --wave 1x5 --repeat 1 --latency-ms 800
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

import click

from ops.bench.wave_memory import (
    DEFAULT_PG_ADMIN_URL,
    DEFAULT_REDIS_URL,
    Worker,
    scratch_database,
    scratch_redis,
)
from ops.fake_gemini import FakeGemini, SimConfig
from scheduler.cli.follow import until_finished
from worker.celery import create_app
from worker.config import RunConfig, WaveSpec
from worker.runs.create import create_run
from worker.settings import Settings
from worker.store.engine import utcnow
from worker.store.warmup import first_turns

#: Cache-warm dispatch on (the candidate), then off (the baseline).
MODES: tuple[Literal["on", "off"], ...] = ("on", "off")
#: Figures of one repetition that the summary takes the median of.
MEDIAN_KEYS = (
    "first_turn_share",
    "first_turn_usd",
    "cost_usd",
    "wall_s",
    "succeeded",
    "total",
    "log_alerts",
)


def measure(
    *,
    database_url: str,
    redis_url: str,
    model: str,
    config: RunConfig,
    latency_ms: int,
    verifier: str,
    timeout_s: float,
    budget_usd: float | None = None,
    concurrency: int = 100,
    pool: str = "threads",
) -> dict[str, Any]:
    """One run of ``config`` on a fresh fake Gemini API (same seed) and a fresh worker
    (``concurrency`` slots of ``pool``)."""
    rt = create_app(Settings(database_url=database_url, broker_url=redis_url)).runtime
    with FakeGemini(sim=SimConfig(seed=config.seed, latency_ms=latency_ms)) as fake:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SWARM_")}
        env.update(
            SWARM_DATABASE_URL=database_url,
            SWARM_BROKER_URL=redis_url,
            SWARM_GEMINI_BASE_URL=fake.url,
            SWARM_VERIFIER=verifier,
            GEMINI_API_KEY="bench-key",
        )
        worker = Worker(env, interval_s=1.0, concurrency=concurrency, pool=pool)
        try:
            worker.wait_ready()
            started = time.monotonic()
            with rt.engine.begin() as conn:
                run_id = create_run(
                    conn, model=model, config=config, now=utcnow(), budget_usd=budget_usd
                )
            rt.flush_outbox(run_id)
            figures = until_finished(
                rt.engine, run_id, show=False, timeout_s=timeout_s, prices=rt.prices
            )
            wall_s = time.monotonic() - started
        finally:
            worker.stop()
    with rt.engine.connect() as conn:
        first = first_turns(conn, run_id=run_id)
    rt.engine.dispose()
    timings = figures.timings
    return {
        "first_turns": first.turns,
        "first_turn_share": round(first.cache_share or 0.0, 4),
        "first_turn_usd": round(first.cost_usd, 6),
        "cost_usd": round(figures.cost_usd, 6),
        "wall_s": round(wall_s, 2),
        "succeeded": figures.sessions.succeeded,
        "total": figures.sessions.total,
        "status": figures.status.value,
        "stop_reason": figures.stop_reason,
        "log_alerts": len(worker.alerts),
        "alerts": worker.alerts[:20],
        # The reservation's share of a turn (turns of a run whose calls are reserved).
        "reserve_ms_p50": timings.phases_ms["reserve"].p50 if timings else None,
        "reserve_cpu_ms_p50": timings.reserve_cpu_ms.p50 if timings else None,
        "reserve_cpu_ms_p99": timings.reserve_cpu_ms.p99 if timings else None,
        "reserved_usd_at_end": figures.budget.reserved_usd if figures.budget else None,
    }


def compare(
    configs: dict[str, RunConfig],
    *,
    label: str,
    repeat: int,
    keys: Sequence[str],
    describe: Callable[[str, dict[str, Any]], str],
    pg_admin_url: str,
    redis_url: str,
    **run: Any,
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, dict[str, Any]]]:
    """Measure each config ``repeat`` times, in turn, each on a scratch database and Redis db.

    Prints every repetition (and its worker's log alerts) on stderr; returns the
    repetitions of each config and the median of each of ``keys``.
    """
    reps: dict[str, list[dict[str, Any]]] = {mode: [] for mode in configs}
    for i in range(repeat):
        for mode, config in configs.items():
            with scratch_database(pg_admin_url) as db_url, scratch_redis(redis_url) as r_url:
                rep = measure(database_url=db_url, redis_url=r_url, config=config, **run)
            reps[mode].append(rep)
            print(describe(f"rep {i + 1} {label} {mode}", rep), file=sys.stderr, flush=True)
            for alert in rep["alerts"]:
                print(f"    worker: {alert}", file=sys.stderr)
    medians = {m: {k: statistics.median(r[k] for r in rs) for k in keys} for m, rs in reps.items()}
    return reps, medians


def line(label: str, f: dict[str, Any]) -> str:
    """One repetition (or a median) as a line."""
    return (
        f"{label}: first turns {f['first_turn_share']:.1%} cached, ${f['first_turn_usd']:.6f}; "
        f"run ${f['cost_usd']:.6f}, {f['succeeded']:g}/{f['total']:g} succeeded, "
        f"{f['wall_s']:.1f} s, worker log alerts: {f['log_alerts']:g}"
    )


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.3f}" if b else "n/a"


def shared_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The options both comparisons take: model, repetitions, seed, services, output."""
    options = [
        click.option("--model", default="gemini-3-flash-preview", help="A Gemini model."),
        click.option("--repeat", type=click.IntRange(min=1), default=3, help="Reps per mode."),
        click.option("--seed", type=int, default=7, help="Seed of every run."),
        click.option("--timeout-s", type=float, default=900.0, help="Longest wait for a run."),
        click.option("--pg-admin-url", default=DEFAULT_PG_ADMIN_URL),
        click.option("--redis-url", default=DEFAULT_REDIS_URL),
        click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


@click.command(context_settings={"show_default": True})
@click.option("--wave", default="2x10", help="Wave spec of every run.")
@click.option(
    "--latency-ms", type=click.IntRange(min=0), default=1500, help="Fake API call latency."
)
@click.option("--verifier", type=click.Choice(["static", "browser", "auto"]), default="static")
@shared_options
def main(wave: str, seed: int, as_json: bool, **opts: Any) -> None:
    """Run the same Gemini run with cache-warm dispatch on and off; print both and ratios."""
    spec = WaveSpec.parse(wave)
    reps, med = compare(
        {mode: RunConfig(waves=str(spec), seed=seed, cache_warm=mode) for mode in MODES},
        label="cache-warm",
        keys=MEDIAN_KEYS,
        describe=line,
        **opts,
    )
    on, off = med["on"], med["off"]
    summary = {
        "wave": str(spec),
        "model": opts["model"],
        "seed": seed,
        "latency_ms": opts["latency_ms"],
        "repeat": opts["repeat"],
        "warm": on,
        "cold": off,
        "first_turn_usd_ratio": _ratio(on["first_turn_usd"], off["first_turn_usd"]),
        "cost_usd_ratio": _ratio(on["cost_usd"], off["cost_usd"]),
        "saved_usd": round(off["cost_usd"] - on["cost_usd"], 6),
        "wall_s_ratio": _ratio(on["wall_s"], off["wall_s"]),
        "reps": reps,
    }
    if as_json:
        print(json.dumps(summary, indent=2))
        return
    print(
        f"{spec} on {opts['model']}, seed {seed}, fake latency {opts['latency_ms']} ms, "
        f"medians of {opts['repeat']}:"
    )
    print(line("  cache-warm on ", on))
    print(line("  cache-warm off", off))
    print(
        f"  warm/cold: first-turn $ {summary['first_turn_usd_ratio']}, run $ "
        f"{summary['cost_usd_ratio']} (saved ${summary['saved_usd']:.6f}), "
        f"wall time {summary['wall_s_ratio']}"
    )


if __name__ == "__main__":
    main()
