"""Resource samples of each worker process (RSS, CPU, threads), tagged with the runs in flight.

``worker.celery`` wires this module to Celery's signals: task signals count the sessions in
flight (:func:`task_started`, :func:`task_ended`); worker signals start one :class:`Sampler`
per process that executes tasks and stop it, writing what it buffered, on shutdown. Each
reading becomes one row per run in flight, or one row without a run when idle: the baseline
reports subtract.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any

import psutil
from sqlalchemy import Connection, Engine, insert, select

from worker.fleet.identity import this_host
from worker.settings import SESSIONS_QUEUE, VERIFY_QUEUE, Settings
from worker.store.engine import utcnow
from worker.store.tables import samples, sessions

logger = logging.getLogger(__name__)

#: Readings kept while the database cannot take them (an hour at the default period).
DEFAULT_MAX_BUFFERED = 7200
#: Sessions whose run is remembered before that cache starts over.
MAX_CACHED_SESSIONS = 10_000
#: Seconds a shutting-down worker waits for the sampler's last write.
STOP_TIMEOUT_S = 10.0


class Role(str, Enum):
    """What a sample row measures."""

    #: a process consuming the sessions queue (and perhaps the verify queue too)
    sessions = "sessions"
    #: a process consuming the verify queue only
    verify = "verify"
    #: the summed descendants of a verify-consuming process: Chromium and its helpers
    browser = "browser"


@dataclass(frozen=True)
class Reading:
    """One measurement, with the sessions in flight when it was taken."""

    role: Role
    at: datetime
    rss_bytes: int
    cpu_percent: float
    threads: int
    session_ids: frozenset[int]


class InFlight:
    """Sessions whose tasks run in this process, counted (a duplicate delivery may overlap)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[int] = Counter()

    def add(self, session_id: int) -> None:
        """A task of ``session_id`` started."""
        with self._lock:
            self._counts[session_id] += 1

    def discard(self, session_id: int) -> None:
        """A task of ``session_id`` ended."""
        with self._lock:
            self._counts[session_id] -= 1
            if self._counts[session_id] <= 0:
                del self._counts[session_id]

    def snapshot(self) -> frozenset[int]:
        """The sessions with at least one task running."""
        with self._lock:
            return frozenset(self._counts)


class SampleBuffer:
    """Readings waiting for the database, oldest first; beyond ``max_len`` the oldest go."""

    def __init__(self, max_len: int) -> None:
        self.max_len = max_len
        self.items: list[Reading] = []
        self.dropped = 0
        """Readings dropped since the last successful write."""

    def add(self, readings: Iterable[Reading], *, oldest: bool = False) -> None:
        """Add readings after the others, or before them (a batch that was not written)."""
        if oldest:
            self.items[:0] = readings
        else:
            self.items.extend(readings)
        excess = max(0, len(self.items) - self.max_len)
        del self.items[:excess]
        self.dropped += excess

    def take(self) -> list[Reading]:
        """Remove and return everything, oldest first."""
        items, self.items = self.items, []
        return items


def rows_for(
    reading: Reading, *, host: str, pid: int, run_of: Mapping[int, int]
) -> list[dict[str, Any]]:
    """The ``samples`` rows of one reading: one per run in flight, one without a run if idle.

    Sessions whose run is unknown (deleted since) are left out; a reading with only those
    gives no row rather than one that would pass for the idle baseline.
    """
    run_ids: Iterable[int | None] = (
        sorted({run_of[s] for s in reading.session_ids if s in run_of})
        if reading.session_ids
        else [None]
    )
    return [
        {
            "run_id": run_id,
            "host": host,
            "pid": pid,
            "role": reading.role.value,
            "at": reading.at,
            "rss_bytes": reading.rss_bytes,
            "cpu_percent": reading.cpu_percent,
            "threads": reading.threads,
        }
        for run_id in run_ids
    ]


class Sampler:
    """Measures one process every ``interval_s``; writes batches at least every ``flush_s``."""

    def __init__(
        self,
        *,
        engine: Engine,
        role: Role,
        browser: bool,
        interval_s: float,
        flush_s: float,
        in_flight: InFlight,
        max_buffered: int = DEFAULT_MAX_BUFFERED,
        process: psutil.Process | None = None,
    ) -> None:
        self.engine = engine
        self.role = role
        self.browser = browser
        self.interval_s = interval_s
        self.flush_s = flush_s
        self.in_flight = in_flight
        self.process = process or psutil.Process()
        self.pid: int = self.process.pid
        self.host = this_host()[:128]
        self.buffer = SampleBuffer(max_buffered)
        self._children: dict[int, psutil.Process] = {}
        self._run_of: dict[int, int] = {}
        self._stop_event = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="swarm-sampler", daemon=True)
        # psutil's first cpu_percent() only starts the clock the next one is measured against.
        self.process.cpu_percent(None)

    def start(self) -> None:
        """Sample once now (the worker idling: the baseline), then on a daemon thread."""
        try:
            self.sample()
        except psutil.Error:
            logger.warning("could not sample process %s", self.pid, exc_info=True)
        self._thread.start()

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Stop sampling; the thread writes what is buffered (waited for at most ``timeout_s``)."""
        self._stop_event.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _loop(self) -> None:
        flush_at = time.monotonic() + self.flush_s
        while not self._stop_event.wait(self.interval_s):
            try:
                self.sample()
            except psutil.Error:
                logger.warning("could not sample process %s", self.pid, exc_info=True)
            if time.monotonic() >= flush_at:
                self.flush()
                flush_at = time.monotonic() + self.flush_s
        self.flush()

    def sample(self) -> None:
        """Measure once and buffer the readings."""
        at = utcnow()
        session_ids = self.in_flight.snapshot()
        with self.process.oneshot():
            readings = [
                Reading(
                    self.role,
                    at,
                    self.process.memory_info().rss,
                    self.process.cpu_percent(None),
                    self.process.num_threads(),
                    session_ids,
                )
            ]
        tree = self._measure_descendants() if self.browser else None
        if tree is not None:
            readings.append(Reading(Role.browser, at, *tree, session_ids))
        self.buffer.add(readings)

    def _measure_descendants(self) -> tuple[int, float, int] | None:
        """Summed RSS, CPU and threads of every descendant, or None when there is none."""
        found = {p.pid: p for p in self.process.children(recursive=True)}
        # Keep the Process objects already seen: cpu_percent() counts from their last call.
        # A new one reads 0.0 once; psutil compares creation times, so a reused pid is new.
        self._children = {
            pid: self._children[pid] if self._children.get(pid) == p else p
            for pid, p in found.items()
        }
        totals: list[tuple[int, float, int]] = []
        for proc in self._children.values():
            try:
                with proc.oneshot():
                    if proc.status() != psutil.STATUS_ZOMBIE:  # dead, not yet reaped
                        totals.append(
                            (proc.memory_info().rss, proc.cpu_percent(None), proc.num_threads())
                        )
            except psutil.Error:  # exited between the listing and the reading
                continue
        if not totals:
            return None
        rss_bytes, cpu_percent, threads = zip(*totals, strict=True)
        return sum(rss_bytes), sum(cpu_percent), sum(threads)

    def flush(self) -> int:
        """Write the buffered readings, or keep them for next time; returns rows written."""
        batch = self.buffer.take()
        if not batch:
            return 0
        try:
            with self.engine.begin() as conn:
                self._resolve_runs(conn, set[int]().union(*(r.session_ids for r in batch)))
                rows = [
                    row
                    for r in batch
                    for row in rows_for(r, host=self.host, pid=self.pid, run_of=self._run_of)
                ]
                if rows:
                    conn.execute(insert(samples), rows)
        except Exception as exc:  # the database may be down; the worker must carry on
            self.buffer.add(batch, oldest=True)
            logger.warning(
                "could not write %d resource samples (%s); keeping the newest %d "
                "of at most %d, %d dropped so far",
                len(batch),
                str(exc).partition("\n")[0],
                len(self.buffer.items),
                self.buffer.max_len,
                self.buffer.dropped,
            )
            return 0
        self.buffer.dropped = 0
        return len(rows)

    def _resolve_runs(self, conn: Connection, session_ids: set[int]) -> None:
        """Cache the runs of sessions not seen yet (a session never changes run)."""
        if len(self._run_of) + len(session_ids) > MAX_CACHED_SESSIONS:
            self._run_of.clear()
        missing = session_ids - self._run_of.keys()
        if missing:
            found = conn.execute(
                select(sessions.c.id, sessions.c.run_id).where(sessions.c.id.in_(missing))
            ).all()
            self._run_of.update({row.id: row.run_id for row in found})


_in_flight = InFlight()
_sampler: Sampler | None = None
_sampler_lock = threading.Lock()


def start_sampler(*, engine: Engine, settings: Settings, queues: Iterable[str]) -> Sampler:
    """Start this process's sampler, unless one already runs here.

    Args:
        engine: Where the samples go.
        settings: The sampling period and flush interval.
        queues: The queues this process consumes, which decide its role.
    """
    global _sampler
    with _sampler_lock:
        # A sampler inherited through fork has no thread here: this process needs its own.
        if _sampler is None or _sampler.pid != os.getpid():
            consumed = set(queues)
            _sampler = Sampler(
                engine=engine,
                in_flight=_in_flight,
                role=Role.sessions if SESSIONS_QUEUE in consumed else Role.verify,
                # Static verification starts no browser: no process tree to walk (finding
                # children reads every process of the host, twice a second).
                browser=VERIFY_QUEUE in consumed and settings.verifier != "static",
                interval_s=settings.sample_interval_s,
                flush_s=settings.sample_flush_s,
            )
            _sampler.start()
            logger.info(
                "sampling process %s as %s every %gs",
                _sampler.pid,
                _sampler.role.value,
                _sampler.interval_s,
            )
        return _sampler


def stop_sampler() -> None:
    """Stop this process's sampler, if one runs, and write what it buffered."""
    global _sampler
    with _sampler_lock:
        sampler, _sampler = _sampler, None
    if sampler is not None and sampler.pid == os.getpid():
        sampler.stop()


def task_started(session_id: int) -> None:
    """A task of ``session_id`` started in this process."""
    _in_flight.add(session_id)


def task_ended(session_id: int) -> None:
    """A task of ``session_id`` ended in this process."""
    _in_flight.discard(session_id)
