"""Where a run's turns spent their time: the timing ledger's percentiles and their course.

Every committed turn has a row in ``turn_timings`` (written with its commit). The overhead
of a turn is everything but the model call: queue wait, claim, history rebuild, the
reservation of the call's cost (in a run with a budget), tools, commit and dispatch.
``status`` prints its percentiles, ``report`` tabulates them per run (so per ladder tier)
and the HTML page charts them over the run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.engine import Connection

from worker.agent.timings import OVERHEAD_PHASES, PHASES
from worker.store.tables import turn_timings

__all__ = ["OverTime", "Percentiles", "TurnTimings", "percentile", "timing_figures"]

#: Time slices the course of the overhead over a run is cut into, at most.
TIME_SLICES = 40


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0 < q <= 100) by nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(math.ceil(q / 100 * len(ordered)) - 1, 0)]


@dataclass(frozen=True)
class Percentiles:
    """p50, p95 and p99 of some milliseconds; None when nothing was measured."""

    p50: float | None
    p95: float | None
    p99: float | None

    @classmethod
    def of(cls, values: Sequence[float]) -> Percentiles:
        """The percentiles of ``values``."""
        ordered = sorted(values)
        return cls(*(percentile(ordered, q) for q in (50, 95, 99)))


@dataclass(frozen=True)
class OverTime:
    """The overhead over the run, slice by slice of the time turns were claimed in."""

    at_s: list[float]
    """Middle of each slice, in seconds since the first claim."""
    p50_ms: list[float]
    p99_ms: list[float]
    turns: list[int]


@dataclass(frozen=True)
class TurnTimings:
    """A run's timing ledger, summed up."""

    turns: int
    """Committed turns with a ledger row."""
    overhead_ms: Percentiles
    """Per turn, every phase but the model call."""
    phases_ms: dict[str, Percentiles]
    """Each phase of :data:`~worker.agent.timings.PHASES`."""
    cpu_ms: Percentiles
    """Worker CPU per turn (the turn's thread, claim to commit)."""
    cpu_mean_ms: float | None
    duplicate_turn_tasks: int
    """Turn tasks that found their turn not due (sent again, or late) and did nothing."""
    over_time: OverTime
    reserve_cpu_ms: Percentiles = field(default_factory=lambda: Percentiles(None, None, None))
    """Worker CPU per turn of reserving its model call's cost (turns of a budgeted run)."""
    statements: Percentiles = field(default_factory=lambda: Percentiles(None, None, None))
    """Statements per turn sent to PostgreSQL before its commit statement (one more)."""
    round_trips: Percentiles = field(default_factory=lambda: Percentiles(None, None, None))
    """Their round trips per turn, BEGIN included (the commit and COMMIT are two more)."""


def timing_figures(conn: Connection, run_id: int, *, duplicates: int) -> TurnTimings:
    """The ledger of run ``run_id``; ``duplicates`` is the run's count of skipped turn tasks."""
    t = turn_timings
    rows = conn.execute(
        select(
            t.c.claimed_at,
            *[t.c[f"{p}_ms"] for p in PHASES],
            t.c.cpu_ms,
            t.c.reserve_cpu_ms,
            t.c.statements,
            t.c.round_trips,
        )
        .where(t.c.run_id == run_id)
        .order_by(t.c.claimed_at)
    ).all()
    phases = {
        p: [float(r[i + 1]) for r in rows if r[i + 1] is not None] for i, p in enumerate(PHASES)
    }
    overhead = [_overhead(dict(zip(PHASES, r[1 : 1 + len(PHASES)], strict=True))) for r in rows]
    cpu = [float(r.cpu_ms) for r in rows]
    reserve_cpu = [float(r.reserve_cpu_ms) for r in rows if r.reserve_cpu_ms is not None]
    sent = [r for r in rows if r.statements is not None]
    return TurnTimings(
        turns=len(rows),
        overhead_ms=Percentiles.of(overhead),
        phases_ms={p: Percentiles.of(v) for p, v in phases.items()},
        cpu_ms=Percentiles.of(cpu),
        cpu_mean_ms=math.fsum(cpu) / len(cpu) if cpu else None,
        duplicate_turn_tasks=duplicates,
        over_time=_over_time([r.claimed_at for r in rows], overhead),
        reserve_cpu_ms=Percentiles.of(reserve_cpu),
        statements=Percentiles.of([float(r.statements) for r in sent]),
        round_trips=Percentiles.of([float(r.round_trips) for r in sent]),
    )


def _overhead(ms: dict[str, float | None]) -> float:
    return math.fsum(ms[p] or 0.0 for p in OVERHEAD_PHASES)


def _over_time(at: list[datetime], overhead: list[float]) -> OverTime:
    if not at:
        return OverTime([], [], [], [])
    start = at[0]
    span_s = max((at[-1] - start).total_seconds(), 1e-3)
    width_s = span_s / TIME_SLICES
    slices: dict[int, list[float]] = {}
    for when, ms in zip(at, overhead, strict=True):
        k = min(int((when - start).total_seconds() / width_s), TIME_SLICES - 1)
        slices.setdefault(k, []).append(ms)
    keys = sorted(slices)
    return OverTime(
        at_s=[round((k + 0.5) * width_s, 3) for k in keys],
        p50_ms=[percentile(slices[k], 50) or 0.0 for k in keys],
        p99_ms=[percentile(slices[k], 99) or 0.0 for k in keys],
        turns=[len(slices[k]) for k in keys],
    )
