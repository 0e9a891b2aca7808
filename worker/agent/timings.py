"""Where a turn's time goes: a stopwatch of named phases, read into the turn's ledger row.

Wall time comes from :func:`time.perf_counter`, CPU from the runtime's CPU clock: by
default :func:`time.thread_time` (the turn runs on one thread from claim to commit, so that
is the CPU this turn cost the worker, whatever other turns the process runs meanwhile);
under a green pool, the CPU of the turn's own greenlet (:mod:`worker.fleet.greenlets`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

#: Phases of a turn, in the order it runs them; all but ``model`` are overhead. ``reserve``
#: (the model call's cost held against the run's budget) only in a run with a budget.
PHASES = ("queue", "claim", "rebuild", "reserve", "model", "tools", "commit", "dispatch")
#: Phases that are not the model call.
OVERHEAD_PHASES = tuple(p for p in PHASES if p != "model")


@dataclass
class TurnTimer:
    """Milliseconds charged to each phase, lap after lap, and the turn's CPU since start."""

    phases: dict[str, float] = field(default_factory=dict)
    cpu_clock: Callable[[], float] = time.thread_time
    cpu_phases: dict[str, float] = field(default_factory=dict)
    """CPU milliseconds of the steps measured with :meth:`cpu_of`."""
    """Seconds of CPU the running turn has used so far (any origin)."""
    _cpu_started: float = field(init=False)
    _last: float = field(default_factory=time.perf_counter)

    def __post_init__(self) -> None:
        self._cpu_started = self.cpu_clock()

    def lap(self, phase: str) -> float:
        """Charge the time since the previous lap to ``phase``; returns that lap in ms."""
        now = time.perf_counter()
        ms = (now - self._last) * 1000
        self._last = now
        self.phases[phase] = self.phases.get(phase, 0.0) + ms
        return ms

    def ms(self, phase: str) -> float:
        """Milliseconds charged to ``phase`` so far."""
        return self.phases.get(phase, 0.0)

    @contextmanager
    def cpu_of(self, step: str) -> Iterator[None]:
        """Charge the CPU the block uses to ``step`` (wall time still goes by laps)."""
        started = self.cpu_clock()
        try:
            yield
        finally:
            used = (self.cpu_clock() - started) * 1000
            self.cpu_phases[step] = self.cpu_phases.get(step, 0.0) + used

    def cpu_ms(self) -> float:
        """CPU milliseconds the turn used since the timer started."""
        return (self.cpu_clock() - self._cpu_started) * 1000

    def row(
        self,
        *,
        claimed_at: datetime,
        dispatched_at: datetime | None,
        dispatch_ms: float | None,
    ) -> dict[str, Any]:
        """The ledger's columns (``worker.store.tables.turn_timings``) for this turn."""
        queue_ms = (
            max((claimed_at - dispatched_at).total_seconds() * 1000, 0.0)
            if dispatched_at is not None
            else None
        )
        return {
            "claimed_at": claimed_at,
            "queue_ms": queue_ms,
            **{f"{p}_ms": self.ms(p) for p in ("claim", "rebuild", "model", "tools", "commit")},
            "dispatch_ms": dispatch_ms,
            "cpu_ms": self.cpu_ms(),
            "reserve_ms": self.phases.get("reserve"),
            "reserve_cpu_ms": self.cpu_phases.get("reserve"),
        }
