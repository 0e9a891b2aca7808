"""The database pool: sized to the worker's threads, and a saturated worker waits, not fails."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable

import pytest
from sqlalchemy import Engine, select, text

from tests.conftest import RecordingDispatcher, WorkerProcess
from tests.factories import ScriptedModel, call, make_run, model_turn, page
from worker.agent.turn import run_turn
from worker.celery import create_app
from worker.errors import TransientError
from worker.fleet.dispatch import TURN_TASK
from worker.fleet.runtime import Runtime
from worker.models.base import ModelRequest
from worker.settings import Settings
from worker.store.claims import lease_turn
from worker.store.engine import make_engine, pool_sizes, utcnow
from worker.store.tables import lease_holders, sessions

pytestmark = pytest.mark.services

#: Seconds the worker may take to log its pool once ready.
POOL_LOG_TIMEOUT_S = 30
_POOL_LINE = re.compile(r"database pool: (\d+) connections, (\d+) more when busy, for (\S+)")
#: Workers that must fit in PostgreSQL together, and connections left for the rest.
WORKERS = 3
SPARE = 10


def _pool_line(worker: WorkerProcess) -> tuple[int, int, str]:
    deadline = time.monotonic() + POOL_LOG_TIMEOUT_S
    while time.monotonic() < deadline:
        for line in list(worker.log):
            if found := _POOL_LINE.search(line):
                return int(found.group(1)), int(found.group(2)), found.group(3)
        time.sleep(0.1)
    raise AssertionError("no pool line in the worker's log:\n" + "\n".join(worker.log[-20:]))


def _tight_runtime(settings: Settings, *, size: int, timeout_s: float) -> Runtime:
    """A process's runtime whose pool has ``size`` connections and no overflow."""
    tight = settings.model_copy(
        update={"db_pool_size": size, "db_max_overflow": 0, "db_pool_timeout_s": timeout_s}
    )
    return Runtime(settings=tight, engine=make_engine(tight), dispatcher=RecordingDispatcher())


def _page_author(before: Callable[[ModelRequest], None]) -> ScriptedModel:
    """A model that creates the dashboard in one call, running ``before`` inside it."""
    created = call("manage_artifact", action="create", name="dashboard.html", content=page())
    return ScriptedModel([model_turn(created)], before=before)


def _next_turn(engine: Engine, session_id: int) -> int:
    with engine.connect() as conn:
        query = select(sessions.c.next_turn).where(sessions.c.id == session_id)
        return int(conn.execute(query).scalar_one())


def _close(rt: Runtime) -> None:
    rt.engine.dispose()
    if rt.lease_engine is not None:
        rt.leases.stop()
        rt.lease_engine.dispose()


def test_pool_grows_with_threads_within_bounds(settings: Settings) -> None:
    # Given no explicit pool settings
    # Then a small worker may hold 5 + 15, a large one 5 and a tenth of its threads, all kept
    assert pool_sizes(settings) == (20, 0)
    assert pool_sizes(settings, 20) == (20, 0)
    assert pool_sizes(settings, 200) == (25, 0)
    assert pool_sizes(settings, 1000) == (30, 0)
    assert pool_sizes(settings, 100_000) == (30, 0)
    # And explicit settings win, each on its own
    assert pool_sizes(settings.model_copy(update={"db_max_overflow": 2}), 1000) == (5, 2)
    assert pool_sizes(settings.model_copy(update={"db_pool_size": 8}), 1000) == (8, 25)


def test_a_200_thread_worker_gets_a_pool_that_fits(
    engine: Engine, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given a worker started with -c 200
    worker = start_worker(concurrency=200)
    # Then its pool is sized to its threads
    size, overflow, threads = _pool_line(worker)
    assert (size, overflow, threads) == (25, 0, "200")
    # And three such workers fit in this PostgreSQL, with room for the scheduler and Flower
    with engine.connect() as conn:
        max_connections = int(conn.execute(text("SHOW max_connections")).scalar_one())
    assert WORKERS * (size + overflow) + SPARE <= max_connections
    assert worker.errors() == []


def test_the_pool_keeps_the_connections_a_busy_moment_opened(settings: Settings) -> None:
    # Given the engine of a worker of 200 threads, with the default pool
    engine = make_engine(settings, threads=200)
    try:
        # When ten tasks hold a connection at once, twice, one burst after the other
        def burst() -> set[int]:
            conns = [engine.connect() for _ in range(10)]
            try:
                return {int(c.execute(text("SELECT pg_backend_pid()")).scalar_one()) for c in conns}
            finally:
                for c in conns:
                    c.close()

        first, second = burst(), burst()
        # Then the second burst ran on the first one's connections: no backend was started
        assert len(first) == 10
        assert second == first
    finally:
        engine.dispose()


def test_explicit_pool_settings_win_over_the_threads(
    start_worker: Callable[..., WorkerProcess],
) -> None:
    # Given a worker started with -c 200 and SWARM_DB_MAX_OVERFLOW=3
    worker = start_worker(concurrency=200, SWARM_DB_POOL_SIZE="2", SWARM_DB_MAX_OVERFLOW="3")
    # Then the settings win
    assert _pool_line(worker) == (2, 3, "200")


def test_a_turn_that_waits_too_long_for_a_connection_is_retried(
    settings: Settings, engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a process whose pool has one connection, held by someone else
    tight = settings.model_copy(
        update={"db_pool_size": 1, "db_max_overflow": 0, "db_pool_timeout_s": 0.2}
    )
    app = create_app(tight)
    task = app.tasks[TURN_TASK]
    _, (sid,) = make_run(engine)
    held = app.runtime.engine.connect()
    # When the turn task runs
    try:
        with caplog.at_level(logging.WARNING), pytest.raises(TransientError) as raised:
            task.run(session_id=sid, turn_no=0)
    finally:
        held.close()
    # Then it asks to be retried once a lease would have lapsed, without using up a retry
    assert raised.value.delay_s == tight.lease_ttl_s
    assert raised.value.counts is False
    assert [r.levelno for r in caplog.records if "no database connection" in r.message] == [
        logging.WARNING
    ]
    # And nothing was claimed: the session waits for that turn
    with engine.connect() as conn:
        row = conn.execute(
            select(sessions.c.status, sessions.c.next_turn, sessions.c.turn_attempts).where(
                sessions.c.id == sid
            )
        ).one()
    assert tuple(row) == ("running", 0, 0)
    # And the retry, with a connection free, runs the turn
    try:
        assert task.run(session_id=sid, turn_no=0) == "committed"
    finally:
        app.runtime.engine.dispose()


def test_a_turn_whose_commit_waits_past_the_pool_timeout_commits_once_a_connection_frees(
    settings: Settings, engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a process whose pool has one connection, which someone else takes while the
    # turn's model call is out and gives back well after the pool's timeout
    rt = _tight_runtime(settings, size=1, timeout_s=0.2)
    _, (sid,) = make_run(engine)
    given_back = threading.Event()

    def take(_request: ModelRequest) -> None:
        held = rt.engine.connect()

        def give_back() -> None:
            held.close()
            given_back.set()

        threading.Timer(1.0, give_back).start()

    model = _page_author(take)
    # When the turn runs to its commit
    try:
        with caplog.at_level(logging.WARNING):
            outcome = run_turn(rt=rt, session_id=sid, turn_no=0, model=model)
    finally:
        given_back.wait(10)
        _close(rt)
    # Then it waited on for the connection and committed, instead of giving up the answer
    assert outcome.value == "committed"
    assert [r.message for r in caplog.records if "to commit; waiting on" in r.message]
    with engine.connect() as conn:
        row = conn.execute(
            select(sessions.c.next_turn, sessions.c.turn_attempts).where(sessions.c.id == sid)
        ).one()
    assert tuple(row) == (1, 0)


def test_leases_are_renewed_while_the_task_threads_hold_every_connection(
    settings: Settings, engine: Engine
) -> None:
    # Given a process whose one pooled connection is held, as a saturated worker's are
    rt = _tight_runtime(settings, size=1, timeout_s=0.2)
    _, (sid,) = make_run(engine)
    with engine.begin() as conn:
        claim = lease_turn(conn, session_id=sid, turn_no=0, owner=rt.owner, now=utcnow(), ttl_s=1.0)
    assert claim is not None
    held = rt.engine.connect()
    try:
        # When the process renews the lease of its turn in flight
        with rt.leases.hold(sid, claim.epoch):
            renewed = rt.leases.renew()
    finally:
        held.close()
        rt.engine.dispose()
        assert rt.lease_engine is not None
        rt.lease_engine.dispose()
    # Then it renewed it on a connection of its own, for a whole TTL from now
    assert renewed == 1
    with engine.connect() as conn:
        alive_until = conn.execute(
            select(lease_holders.c.alive_until).where(lease_holders.c.owner == rt.owner)
        ).scalar_one()
    assert alive_until > claim.expires_at


def test_a_commit_waits_its_turn_at_the_gate_holding_no_connection(
    settings: Settings, engine: Engine
) -> None:
    # Given a process whose pool has two connections, so that commits may hold one, and
    # whose one commit slot another turn's commit holds
    rt = _tight_runtime(settings, size=2, timeout_s=0.5)
    _, (sid,) = make_run(engine)
    answered = threading.Event()
    model = _page_author(lambda _request: answered.set())
    outcomes: list[str] = []
    assert rt.commit_gate.acquire(timeout=1)
    turn = threading.Thread(
        target=lambda: outcomes.append(
            run_turn(rt=rt, session_id=sid, turn_no=0, model=model).value
        )
    )
    try:
        # When a turn's model answers while the slot is held
        turn.start()
        assert answered.wait(10)
        turn.join(0.5)
        # Then its commit waits for the slot, holding no connection: both are free for
        # the claims of other turns
        assert turn.is_alive()
        with rt.engine.connect() as one, rt.engine.connect() as two:
            assert one.execute(text("select 1")).scalar_one() == 1
            assert two.execute(text("select 1")).scalar_one() == 1
        assert _next_turn(engine, sid) == 0
    finally:
        rt.commit_gate.release()
        turn.join(10)
        _close(rt)
    # And once the slot frees, the turn commits
    assert outcomes == ["committed"]
    assert _next_turn(engine, sid) == 1
