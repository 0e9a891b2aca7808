"""The resource sampler: batching and its cap in one process, then real workers writing rows."""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import psutil
import pytest
from sqlalchemy import Engine, Row, func, select

from scheduler.cli.follow import until_finished
from tests.conftest import WorkerProcess
from tests.factories import enqueue, make_run
from worker.celery import create_app
from worker.fleet.identity import this_host
from worker.fleet.sampler import (
    InFlight,
    Reading,
    Role,
    SampleBuffer,
    Sampler,
    rows_for,
    start_sampler,
    stop_sampler,
)
from worker.settings import Settings
from worker.store.engine import make_engine, utcnow
from worker.store.tables import runs, samples

pytestmark = [pytest.mark.services]

T = TypeVar("T")
#: Sampler timings of the worker tests: sample every 100 ms, write every 300 ms.
SAMPLE_ENV = {"SWARM_SAMPLE_INTERVAL_S": "0.1", "SWARM_SAMPLE_FLUSH_S": "0.3"}
INTERVAL_S = 0.1
FLUSH_S = 0.3
#: Seconds any whole run, or any expected sample, may take to show up.
TIMEOUT_S = 120
#: A database nobody listens on: connections are refused at once.
DOWN_URL = "postgresql://postgres@127.0.0.1:1/nowhere"
MIB = 1024 * 1024


def _eventually(probe: Callable[[], T], what: str, timeout_s: float = TIMEOUT_S) -> T:
    """Poll ``probe`` until it returns something truthy, and return that."""
    deadline = time.monotonic() + timeout_s
    while not (found := probe()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what}")
        time.sleep(0.05)
    return found


def _rows(engine: Engine, pids: Sequence[int] | None = None) -> list[Row[Any]]:
    query = select(samples).order_by(samples.c.at, samples.c.run_id, samples.c.id)
    if pids is not None:
        query = query.where(samples.c.pid.in_(pids))
    with engine.connect() as conn:
        return list(conn.execute(query).all())


def _count(engine: Engine, pids: Sequence[int]) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                select(func.count()).select_from(samples).where(samples.c.pid.in_(pids))
            ).scalar_one()
        )


def _assert_one_sampler_per_process(rows: Sequence[Row[Any]]) -> None:
    """Each process's ticks are at least one period apart (two samplers would interleave)."""
    for _, of_pid in itertools.groupby(sorted(rows, key=lambda r: r.pid), key=lambda r: r.pid):
        ticks = sorted({r.at for r in of_pid if r.role != Role.browser.value})
        gaps_s = [(b - a).total_seconds() for a, b in itertools.pairwise(ticks)]
        assert gaps_s and min(gaps_s) >= 0.9 * INTERVAL_S, gaps_s[:20]


# --- In this process, without a worker ---------------------------------------------------


def _reading(n: int, *session_ids: int) -> Reading:
    return Reading(
        Role.sessions,
        datetime(2025, 1, 1, 0, 0, n, tzinfo=UTC),
        100 * MIB,
        1.5,
        4,
        frozenset(session_ids),
    )


def test_the_buffer_keeps_the_newest_readings_and_each_becomes_a_row_per_run() -> None:
    # Given a buffer of at most 5 readings holding 3
    buffer = SampleBuffer(5)
    buffer.add([_reading(0), _reading(1), _reading(2)])
    # When a batch of 3 is taken, 4 newer readings arrive, and the batch is put back
    batch = buffer.take()
    assert buffer.items == []
    buffer.add([_reading(3), _reading(4), _reading(5), _reading(6)])
    buffer.add(batch, oldest=True)
    # Then the 5 newest are kept in order and the 2 oldest counted as dropped
    assert [r.at.second for r in buffer.items] == [2, 3, 4, 5, 6]
    assert buffer.dropped == 2
    buffer.add([_reading(7)])
    assert [r.at.second for r in buffer.items] == [3, 4, 5, 6, 7] and buffer.dropped == 3
    # and a reading is one row without a run when idle, one per run of its sessions when
    # busy, and no row when none of its sessions has a known run (it is not idle)
    run_of = {11: 1, 12: 1, 21: 2}
    assert [r["run_id"] for r in rows_for(_reading(0), host="h", pid=7, run_of=run_of)] == [None]
    busy = rows_for(_reading(0, 21, 12, 11, 99), host="h", pid=7, run_of=run_of)
    assert [r["run_id"] for r in busy] == [1, 2]
    assert busy[0] == {
        "run_id": 1,
        "host": "h",
        "pid": 7,
        "role": "sessions",
        "at": _reading(0).at,
        "rss_bytes": 100 * MIB,
        "cpu_percent": 1.5,
        "threads": 4,
    }
    assert rows_for(_reading(0, 99), host="h", pid=7, run_of=run_of) == []


def test_an_outage_keeps_the_newest_samples_up_to_the_cap(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    # Given two runs, and a sampler that keeps at most 5 readings and whose database is down
    run_a, (a1, a2) = make_run(engine, waves="1x2")
    run_b, (b1,) = make_run(engine)
    in_flight = InFlight()
    down = make_engine(Settings(database_url=DOWN_URL))
    sampler = Sampler(
        engine=down,
        role=Role.verify,
        browser=False,
        interval_s=INTERVAL_S,
        flush_s=FLUSH_S,
        in_flight=in_flight,
        max_buffered=5,
    )
    # When it samples 5 times idle, then 3 times with sessions of both runs in flight
    # (a1 delivered twice, one delivery already over), and fails to write
    for _ in range(5):
        sampler.sample()
    for session_id in (a1, a2, b1, a1):
        in_flight.add(session_id)
    in_flight.discard(a1)
    for _ in range(3):
        sampler.sample()
    with caplog.at_level(logging.WARNING, logger="worker.fleet.sampler"):
        assert sampler.flush() == 0
    # Then the newest 5 are kept, the 3 oldest dropped, and a warning says so
    kept = sampler.buffer.items
    assert [sorted(r.session_ids) for r in kept] == [[], [], *[sorted((a1, a2, b1))] * 3]
    assert sampler.buffer.dropped == 3
    assert "could not write 5 resource samples (" in caplog.text
    assert "keeping the newest 5 of at most 5, 3 dropped so far" in caplog.text
    assert _rows(engine) == []
    # When the database is back
    sampler.engine = engine
    written = sampler.flush()
    # Then each idle reading is one row without a run, each busy one a row per run
    rows = _rows(engine)
    assert written == len(rows) == 2 + 3 * 2
    assert [r.run_id for r in rows] == [None, None, run_a, run_b, run_a, run_b, run_a, run_b]
    assert [r.at for r in rows] == [r.at for r in kept[:2]] + [
        r.at for r in kept[2:] for _ in (run_a, run_b)
    ]
    assert {(r.pid, r.role, r.host) for r in rows} == {(os.getpid(), "verify", this_host())}
    assert all(r.rss_bytes > 10 * MIB and r.threads >= 1 for r in rows)
    assert sampler.buffer.items == [] and sampler.buffer.dropped == 0
    assert sampler.flush() == 0
    down.dispose()


@pytest.fixture
def process_tree() -> Iterator[tuple[psutil.Process, int]]:
    """A sleeping process whose child sleeps and whose grandchild spins: (root, grandchild).

    Each waits for its child first, so that a killed descendant is reaped, not a zombie.
    """
    spin = "while True: pass"
    child = (
        f"import subprocess, sys, time; g = subprocess.Popen([sys.executable, '-c', "
        f"{spin!r}]); print(g.pid, flush=True); g.wait(); time.sleep(120)"
    )
    root_code = (
        f"import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', "
        f"{child!r}]); c.wait(); time.sleep(120)"
    )
    root = subprocess.Popen([sys.executable, "-c", root_code], stdout=subprocess.PIPE, text=True)
    assert root.stdout is not None
    grandchild = int(root.stdout.readline())
    proc = psutil.Process(root.pid)
    yield proc, grandchild
    # Deepest first, so that each is reaped by its parent.
    for p in [*reversed(proc.children(recursive=True)), proc]:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    root.wait(10)
    root.stdout.close()


def test_the_browser_row_sums_every_descendant(
    engine: Engine, process_tree: tuple[psutil.Process, int]
) -> None:
    # Given a sampler of a process that has a child and a spinning grandchild
    root, grandchild = process_tree
    sampler = Sampler(
        engine=engine,
        role=Role.verify,
        browser=True,
        interval_s=INTERVAL_S,
        flush_s=FLUSH_S,
        in_flight=InFlight(),
        process=root,
    )
    # When it samples twice, a measurement window apart
    sampler.sample()
    time.sleep(0.5)
    sampler.sample()
    # Then each tick has the process's row and the summed row of both descendants
    own, tree = sampler.buffer.items[2:]
    assert (own.role, tree.role) == (Role.verify, Role.browser)
    assert tree.threads == 2 and tree.rss_bytes > 2 * 5 * MIB
    # and the spinning grandchild shows in the tree's CPU, not in the sleeping root's
    assert tree.cpu_percent > 20 and own.cpu_percent < 20
    # When the descendants are gone
    psutil.Process(grandchild).kill()
    _eventually(lambda: len(root.children(recursive=True)) == 1, "the grandchild reaped", 10)
    root.children()[0].kill()
    _eventually(lambda: root.children() == [], "the child reaped", 10)
    sampler.buffer.take()
    sampler.sample()
    # Then no browser row is made
    assert [r.role for r in sampler.buffer.items] == [Role.verify]


@pytest.mark.parametrize(
    ("queues", "role", "browser"),
    [
        (["sessions", "verify"], Role.sessions, True),
        (["verify"], Role.verify, True),
        (["sessions"], Role.sessions, False),
    ],
)
def test_the_role_follows_the_queues_and_one_sampler_runs_per_process(
    settings: Settings, engine: Engine, queues: list[str], role: Role, browser: bool
) -> None:
    # Given the app of a worker consuming ``queues``
    app = create_app(
        settings.model_copy(update={"sample_interval_s": INTERVAL_S, "sample_flush_s": FLUSH_S})
    )
    app.amqp.queues.select(queues)
    # When its sampler is started twice in this process (solo pool: two signals)
    try:
        sampler = start_sampler(
            engine=app.runtime.engine, settings=app.settings, queues=app.amqp.queues.consume_from
        )
        again = start_sampler(
            engine=app.runtime.engine, settings=app.settings, queues=app.amqp.queues.consume_from
        )
        rows = _eventually(lambda: _rows(engine, [os.getpid()]), "the first samples", 10)
    finally:
        stop_sampler()
        app.runtime.engine.dispose()
    # Then one sampler ran, with the role and browser tree of the queues, and it wrote
    assert again is sampler
    assert (sampler.role, sampler.browser) == (role, browser)
    assert not sampler._thread.is_alive()
    # (browser rows come and go with this test process's children, e.g. an earlier test's
    # shared Chromium; the process's own rows carry its role)
    assert {r.role for r in rows} - {Role.browser.value} == {role.value}


# --- Real workers ---------------------------------------------------------------------


@pytest.mark.slow
def test_a_worker_samples_itself_idle_and_per_run(
    settings: Settings, engine: Engine, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given a worker on both queues (threads pool) that has written idle samples
    worker = start_worker(**SAMPLE_ENV)
    assert worker.proc is not None
    pid = worker.proc.pid
    _eventually(lambda: _rows(engine, [pid]), "idle samples")
    enqueued_at = utcnow()
    # When a small run goes through it
    run_id = enqueue(settings, "--wave", "1x2", "--sim-latency-ms", "300")
    status = until_finished(engine, run_id, show=False, timeout_s=TIMEOUT_S)
    assert status.sessions.succeeded == 2
    with engine.connect() as conn:
        started_at, finished_at = conn.execute(
            select(runs.c.started_at, runs.c.finished_at).where(runs.c.id == run_id)
        ).one()

    def idle_again() -> list[Row[Any]]:
        rows = _rows(engine, [pid])
        return rows if rows[-1].run_id is None and rows[-1].at > finished_at else []

    rows = _eventually(idle_again, "idle samples after the run")
    # Then its samples carry its pid and role, idle before the run and tagged during it
    assert {(r.pid, r.role, r.host) for r in rows} == {(pid, "sessions", this_host())}
    assert {r.run_id for r in rows} == {None, run_id}
    assert any(r.run_id is None and r.at < enqueued_at for r in rows)
    tagged = [r for r in rows if r.run_id == run_id]
    assert len(tagged) >= 5
    assert all(started_at <= r.at <= finished_at + timedelta(seconds=1) for r in tagged)
    assert all(r.rss_bytes > 30 * MIB and r.threads >= 1 and r.cpu_percent >= 0 for r in rows)
    assert all(r.threads > 2 for r in tagged)  # the pool's threads run the turns
    assert any(r.cpu_percent > 0 for r in tagged)
    # one row per tick (one run in flight), one sampler in the process
    assert len({r.at for r in rows}) == len(rows)
    _assert_one_sampler_per_process(rows)
    assert worker.errors() == []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "role"),
    [
        pytest.param([], "sessions", id="threads"),
        pytest.param(["-P", "prefork", "-c", "2"], "sessions", id="prefork"),
        pytest.param(["-P", "solo", "-Q", "verify"], "verify", id="solo-verify"),
    ],
)
def test_a_stopped_worker_writes_no_more_samples(
    engine: Engine, args: list[str], role: str, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given a worker whose task-executing processes (itself, or its prefork children) sample
    worker = start_worker(*args, **SAMPLE_ENV)
    assert worker.proc is not None
    main_pid = worker.proc.pid
    executing = (
        [p.pid for p in psutil.Process(main_pid).children()] if "prefork" in args else [main_pid]
    )
    assert len(executing) == (2 if "prefork" in args else 1)
    _eventually(
        lambda: {r.pid for r in _rows(engine)} == set(executing),
        "samples of every process that executes tasks",
    )
    # When it is stopped
    assert worker.stop() == 0
    # Then those processes are gone, and their sample count stays put for several flushes
    assert not any(psutil.pid_exists(pid) for pid in executing)
    counts = [_count(engine, executing)]
    deadline = time.monotonic() + 5 * FLUSH_S
    while time.monotonic() < deadline:
        time.sleep(INTERVAL_S)
        counts.append(_count(engine, executing))
    assert counts[0] > 0 and set(counts) == {counts[0]}, counts
    rows = _rows(engine)
    assert {r.pid for r in rows} == set(executing)
    assert {r.role for r in rows} == {role}
    _assert_one_sampler_per_process(rows)


@pytest.mark.slow
def test_shutdown_writes_the_samples_still_buffered(
    settings: Settings, engine: Engine, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given a worker whose sampler would write only every 10 minutes
    worker = start_worker(SWARM_SAMPLE_INTERVAL_S="0.1", SWARM_SAMPLE_FLUSH_S="600")
    assert worker.proc is not None
    pid = worker.proc.pid
    # and that has run a small run without writing a sample yet
    run_id = enqueue(settings, "--wave", "1x1", "--sim-latency-ms", "100")
    until_finished(engine, run_id, show=False, timeout_s=TIMEOUT_S)
    assert _count(engine, [pid]) == 0
    stopped_at = utcnow()
    # When it is stopped
    assert worker.stop() == 0
    # Then its buffered samples were written on the way out, the run's among them
    rows = _rows(engine, [pid])
    assert {r.run_id for r in rows} == {None, run_id}
    assert max(r.at for r in rows) >= stopped_at - timedelta(seconds=1)
    assert isinstance(rows[0].at, datetime) and rows[0].at.tzinfo is not None
