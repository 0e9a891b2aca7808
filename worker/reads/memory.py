"""Resident memory of a run's workers, from the resource samples tagged with the run."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from worker.store.tables import samples

__all__ = ["BROWSER_ROLE", "IDLE_SAMPLES", "SESSIONS_ROLE", "Memory", "memory_figures"]

#: Worker role whose processes run the sessions' turns.
SESSIONS_ROLE = "sessions"
#: Role of the verifier's Chromium process tree.
BROWSER_ROLE = "browser"
#: Idle samples, the latest before a run, whose median is the worker's baseline.
IDLE_SAMPLES = 10


@dataclass(frozen=True)
class Memory:
    """Resident memory of the run's workers, from the samples tagged with the run."""

    sessions_peak_rss_bytes: int | None
    """Largest sample of a ``sessions`` worker; None when there is none."""
    peak_host: str | None
    peak_pid: int | None
    idle_rss_bytes: float | None
    """Median of the peak process's last idle (untagged) samples before the run; None without."""
    concurrent_sessions: int
    """Sessions per wave: what ran at once."""
    rss_per_session_bytes: float | None
    """``(peak - idle) / concurrent_sessions``; None without an idle figure."""
    browser_peak_rss_bytes: int | None
    """Largest sample of the verifier's browser tree; None when there is none."""
    samples: int


def memory_figures(conn: Connection, run_id: int, *, concurrent: int) -> Memory:
    """The run's memory peak, its worker's idle baseline, and what each session added."""
    tagged = samples.c.run_id == run_id
    peak = conn.execute(
        select(samples.c.host, samples.c.pid, samples.c.rss_bytes)
        .where(tagged, samples.c.role == SESSIONS_ROLE)
        .order_by(samples.c.rss_bytes.desc(), samples.c.at)
        .limit(1)
    ).first()
    browser = conn.execute(
        select(func.max(samples.c.rss_bytes)).where(tagged, samples.c.role == BROWSER_ROLE)
    ).scalar()
    n_samples = conn.execute(select(func.count()).select_from(samples).where(tagged)).scalar()
    idle: float | None = None
    if peak is not None:
        # The baseline is the worker as it idled just before this run: later idle samples
        # already carry what earlier runs left behind in the process.
        first = conn.execute(
            select(func.min(samples.c.at)).where(
                tagged, samples.c.host == peak.host, samples.c.pid == peak.pid
            )
        ).scalar()
        values = (
            conn.execute(
                select(samples.c.rss_bytes)
                .where(
                    samples.c.host == peak.host,
                    samples.c.pid == peak.pid,
                    samples.c.role == SESSIONS_ROLE,
                    samples.c.run_id.is_(None),
                    samples.c.at < first,
                )
                .order_by(samples.c.at.desc())
                .limit(IDLE_SAMPLES)
            )
            .scalars()
            .all()
        )
        idle = float(statistics.median(values)) if values else None
    added = (
        (peak.rss_bytes - idle) / concurrent
        if peak is not None and idle is not None and concurrent
        else None
    )
    return Memory(
        sessions_peak_rss_bytes=int(peak.rss_bytes) if peak is not None else None,
        peak_host=peak.host if peak is not None else None,
        peak_pid=int(peak.pid) if peak is not None else None,
        idle_rss_bytes=idle,
        concurrent_sessions=concurrent,
        rss_per_session_bytes=added,
        browser_peak_rss_bytes=int(browser) if browser is not None else None,
        samples=int(n_samples or 0),
    )
