"""The reconciler tells a lost message from one still waiting, on real Redis and PostgreSQL."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, cast

import pytest
from sqlalchemy import Engine, func, select, update

from scheduler.cli.follow import until_finished
from tests.conftest import RecordingDispatcher, WorkerProcess
from tests.factories import make_run
from tests.worker.fleet.conftest import dead_pid
from worker.fleet.broker import RedisBrokerProbe
from worker.fleet.dispatch import CeleryDispatcher
from worker.fleet.identity import process_owner
from worker.fleet.intake import Intake
from worker.fleet.reconciler import Reconciler
from worker.fleet.runtime import Runtime
from worker.settings import SESSIONS_QUEUE, Settings
from worker.states import Outcome
from worker.store.due import Dispatch
from worker.store.endings import count_endings, end_session
from worker.store.tables import runs, sessions, turn_timings, waves

pytestmark = [pytest.mark.services, pytest.mark.usefixtures("empty_broker")]

#: Seconds a whole run in these tests may take.
RUN_TIMEOUT_S = 180


def _dispatched_ago(rt: Runtime, session_id: int, seconds: float) -> None:
    with rt.engine.begin() as conn:
        conn.execute(
            update(sessions)
            .where(sessions.c.id == session_id)
            .values(dispatched_at=rt.clock() - timedelta(seconds=seconds))
        )


def _sent(rt: Runtime) -> list[Dispatch]:
    assert isinstance(rt.dispatcher, RecordingDispatcher)
    return rt.dispatcher.sent


def test_a_turn_waiting_in_a_busy_queue_is_not_sent_again(
    runtime: Runtime, app: Any, probe: RedisBrokerProbe
) -> None:
    # Given a turn whose message waits in the queue (no worker consumes it), dispatched
    # far longer ago than redispatch_after_s
    _, (sid,) = make_run(runtime.engine)
    CeleryDispatcher(app).send(Dispatch(sid, "turn", 0))
    _dispatched_ago(runtime, sid, 10 * runtime.settings.redispatch_after_s)
    # When the reconciler that reads the broker makes two passes
    reconciler = Reconciler(runtime, probe)
    assert reconciler.run_once() + reconciler.run_once() == 0
    # Then it sent nothing: the message is waiting, not lost
    assert _sent(runtime) == []
    # while one that goes by the delay alone would have sent it again
    assert Reconciler(runtime).run_once() == 1
    assert _sent(runtime) == [Dispatch(sid, "turn", 0, takeover=True)]


def test_a_lost_turn_is_sent_again_on_the_second_pass(
    runtime: Runtime, probe: RedisBrokerProbe
) -> None:
    # Given a turn dispatched two seconds ago (within redispatch_after_s) whose message
    # the broker does not hold, as after a Redis restart
    _, (sid,) = make_run(runtime.engine)
    assert runtime.settings.redispatch_after_s > 2.5
    _dispatched_ago(runtime, sid, 2.0)
    reconciler = Reconciler(runtime, probe)
    # When the reconciler makes a first pass, Then it only notes the message missing
    assert reconciler.run_once() == 0
    # When it makes a second pass, Then it sends the turn again, once
    assert reconciler.run_once() == 1
    assert reconciler.run_once() == 0
    assert _sent(runtime) == [Dispatch(sid, "turn", 0, takeover=True)]


def test_a_missing_turn_waits_as_long_as_the_fleets_slowest_sender_takes(
    runtime: Runtime, probe: RedisBrokerProbe
) -> None:
    # Given a turn made due 8 s ago whose message the broker does not hold, and a live
    # worker of the fleet whose sends take 6 s now (a saturated one)
    _, (sid,) = make_run(runtime.engine)
    _dispatched_ago(runtime, sid, 8.0)
    probe.client.hset(probe.workers_key, "busy-host:1", str(time.time()))
    probe.client.hset(probe.send_lags_key, "busy-host:1", "6.0")
    reconciler = Reconciler(runtime, probe)
    # When the reconciler makes two passes, Then it sends nothing: that worker may still
    # be sending it
    assert reconciler.run_once() + reconciler.run_once() == 0
    # When that worker's sends are quick again, Then the next pass sends the turn, once
    probe.client.hset(probe.send_lags_key, "busy-host:1", "0.1")
    assert reconciler.run_once() == 1
    assert reconciler.run_once() == 0
    assert _sent(runtime) == [Dispatch(sid, "turn", 0, takeover=True)]


def test_a_worker_reports_how_long_its_sends_take(runtime: Runtime) -> None:
    # Given a worker whose one send in flight has taken a second so far
    started = threading.Event()
    release = threading.Event()

    class Slow:
        def send(self, item: Dispatch, *, delay_s: float = 0.0) -> None:
            started.set()
            release.wait(10)

    slow = Runtime(settings=runtime.settings, engine=runtime.engine, dispatcher=Slow())
    sending = threading.Thread(target=slow.send_all, args=([Dispatch(1, "turn", 0)],))
    sending.start()
    assert started.wait(10)
    time.sleep(1.0)  # the send's own duration, which the lag reports
    # Then its lag is at least that second, and stays so for a while after the send ends
    assert slow.send_lag_s() >= 1.0
    release.set()
    sending.join(10)
    assert slow.send_lag_s() >= 1.0


def test_a_reserved_turn_is_lost_only_when_a_worker_fell_silent(
    runtime: Runtime, app: Any, probe: RedisBrokerProbe, settings: Settings
) -> None:
    # Given a turn whose message a consumer reserved (unacknowledged) long ago and never ran
    _, (sid,) = make_run(runtime.engine)
    CeleryDispatcher(app).send(Dispatch(sid, "turn", 0))
    _dispatched_ago(runtime, sid, 10 * settings.redispatch_after_s)
    with app.connection_for_read() as conn:
        queue = conn.SimpleQueue(SESSIONS_QUEUE)
        message = queue.get(timeout=10)
        assert message.headers["id"] == f"turn:{sid}:0"
        key = f"{probe.prefix}unacked_index"
        for tag in probe.client.zrange(key, 0, -1):
            probe.client.zincrby(key, -10 * settings.redispatch_after_s, cast(bytes, tag))
        reconciler = Reconciler(runtime, probe)
        # When every worker of the fleet beats, Then the turn waits for the one holding it
        assert f"turn:{sid}:0" in (probe.view() or pytest.fail("no view")).reserved
        assert reconciler.run_once() + reconciler.run_once() == 0
        # When a worker fell silent, Then the turn may be its, and is sent again
        silent_at = time.time() - 2 * probe.silence_s
        probe.client.hset(probe.workers_key, "gone-host:4242", str(silent_at))
        assert reconciler.run_once() == 1
        message.ack()
        queue.close()
    assert _sent(runtime) == [Dispatch(sid, "turn", 0, takeover=True)]
    # and a worker that stops on purpose signs off, so its silence is no death
    probe.sign_off()
    assert runtime.owner.encode() not in probe.client.hgetall(probe.workers_key)


@pytest.mark.slow
def test_a_saturated_worker_gets_no_duplicate_turn_tasks(
    engine: Engine, app: Any, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given a worker that runs one turn at a time, and a wave of 8 sessions: turns wait in
    # the queue for several times redispatch_after_s (1 s here)
    start_worker(concurrency=1, SWARM_REDISPATCH_AFTER_S="1")
    run_id, ids = make_run(engine, waves="1x8", sim_latency_ms=600)
    dispatcher = CeleryDispatcher(app)
    for sid in ids:
        dispatcher.send(Dispatch(sid, "turn", 0))
    # When the run goes to its end, the worker's reconciler passing every 0.5 s
    status = until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
    # Then it succeeded, and not one turn task was sent again only to be skipped...
    assert status.sessions.succeeded == 8
    with engine.connect() as conn:
        longest = conn.execute(
            select(func.max(turn_timings.c.queue_ms)).where(turn_timings.c.run_id == run_id)
        ).scalar_one()
        dup = conn.execute(
            select(runs.c.duplicate_turn_tasks).where(runs.c.id == run_id)
        ).scalar_one()
    assert dup == 0
    # ...though turns waited in the queue for longer than redispatch_after_s
    assert longest > 2_000


def test_a_session_leased_by_a_dead_process_of_this_host_is_taken_over_at_once(
    runtime: Runtime,
) -> None:
    # Given a running session whose lease, good for another minute, is held by a worker
    # process of this host that no longer runs (SIGKILLed)
    _, (sid,) = make_run(runtime.engine)
    dead = process_owner(dead_pid())
    with runtime.engine.begin() as conn:
        conn.execute(
            update(sessions)
            .where(sessions.c.id == sid)
            .values(lease_owner=dead, lease_expires_at=runtime.clock() + timedelta(minutes=1))
        )
    # When the reconciler makes one pass
    assert Reconciler(runtime).run_once() == 1
    # Then the session's turn is sent again, without waiting for the lease to lapse
    assert _sent(runtime) == [Dispatch(sid, "turn", 0, takeover=True)]
    with runtime.engine.connect() as conn:
        owner = conn.execute(select(sessions.c.lease_owner).where(sessions.c.id == sid))
        assert owner.scalar_one() is None


def test_a_turn_reserved_by_a_dead_process_of_this_host_is_sent_again_at_once(
    runtime: Runtime, app: Any, probe: RedisBrokerProbe
) -> None:
    # Given a turn reserved just now (unacknowledged, never run), dispatched longer ago
    # than a sender may take to put a message on the broker, not redispatch_after_s ago
    _, (sid,) = make_run(runtime.engine)
    CeleryDispatcher(app).send(Dispatch(sid, "turn", 0))
    _dispatched_ago(runtime, sid, 0.7 * runtime.settings.redispatch_after_s)
    with app.connection_for_read() as conn:
        queue = conn.SimpleQueue(SESSIONS_QUEUE)
        message = queue.get(timeout=10)
        reconciler = Reconciler(runtime, probe)
        # When only live workers beat, Then it waits for the one holding it
        assert reconciler.run_once() + reconciler.run_once() == 0
        # When a worker of this host that beat a moment ago is found to be gone (killed)
        dead = process_owner(dead_pid())
        probe.client.hset(probe.workers_key, dead, str(time.time()))
        view = probe.view() or pytest.fail("no view")
        assert view.silent_workers == 1
        reserved_s = time.time() - view.reserved[f"turn:{sid}:0"]
        assert reserved_s < 0.5 * runtime.settings.redispatch_after_s, "not by the old delay"
        # Then the turn may be its, and is sent again on the next pass, once
        assert reconciler.run_once() == 1
        assert reconciler.run_once() == 0
        message.ack()
        queue.close()
    assert _sent(runtime) == [Dispatch(sid, "turn", 0, takeover=True)]


def test_a_task_sent_again_is_read_before_those_queued(app: Any) -> None:
    # Given two turns queued the ordinary way
    dispatcher = CeleryDispatcher(app)
    dispatcher.send(Dispatch(1, "turn", 0))
    dispatcher.send(Dispatch(2, "turn", 0))
    # When a third session's turn is sent again, after it lost its worker
    dispatcher.send(Dispatch(3, "turn", 4, takeover=True))
    # Then a worker reads it first, and the others in the order they were sent
    with app.connection_for_read() as conn:
        queue = conn.SimpleQueue(SESSIONS_QUEUE)
        ids = []
        for _ in range(3):
            message = queue.get(timeout=10)
            ids.append(message.headers["id"])
            message.ack()
        queue.close()
    assert ids == ["turn:3:4", "turn:1:0", "turn:2:0"]


class _Unreachable:
    """A dispatcher whose broker is out of reach."""

    def send(self, item: Dispatch, *, delay_s: float = 0.0) -> None:
        raise ConnectionError("broker unreachable")


def test_a_turn_that_could_not_be_sent_is_sent_again_without_waiting(
    runtime: Runtime, probe: RedisBrokerProbe
) -> None:
    # Given a turn committed just now whose send failed: its worker reaches PostgreSQL but
    # not Redis
    _, (sid,) = make_run(runtime.engine)
    _dispatched_ago(runtime, sid, 0.0)
    cut_off = Runtime(settings=runtime.settings, engine=runtime.engine, dispatcher=_Unreachable())
    assert cut_off.send_all([Dispatch(sid, "turn", 0)]) == 0
    # When another worker's reconciler makes two passes, long before redispatch_after_s
    reconciler = Reconciler(runtime, probe)
    sent = reconciler.run_once() + reconciler.run_once()
    # Then it sent the turn, once
    assert sent == 1
    assert _sent(runtime) == [Dispatch(sid, "turn", 0, takeover=True)]
    # while a turn whose send succeeded just now waits for its message to be read
    _, (other,) = make_run(runtime.engine)
    _dispatched_ago(runtime, other, 0.0)
    assert reconciler.run_once() + reconciler.run_once() == 0


class _Intake(Intake):
    """An intake whose remote-control commands are recorded."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        super().__init__(self)
        self.bind("w@h", [SESSIONS_QUEUE])

    def cancel_consumer(self, queue: str, **kwargs: object) -> object:
        self.sent.append("cancel")
        return None

    def add_consumer(self, queue: str, **kwargs: object) -> object:
        self.sent.append("add")
        return None


def test_a_worker_on_a_slow_link_takes_work_only_when_the_fleet_leaves_some_waiting(
    runtime: Runtime, app: Any, probe: RedisBrokerProbe, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given two other workers of the fleet whose round trips to the database take 0.5 ms,
    # and this worker's, which take 200 ms (a slow link)
    for owner in ("h2:1", "h3:1"):
        probe.client.hset(probe.workers_key, owner, str(time.time()))
        probe.client.hset(probe.round_trips_key, owner, "0.5")
    monkeypatch.setattr(Reconciler, "_round_trip_ms", lambda self: 200.0)
    intake = _Intake()
    reconciler = Reconciler(runtime, probe, intake)
    # When the reconciler makes a pass, Then one slow round trip is no slow link
    reconciler.run_once()
    assert intake.sent == []
    # When it makes another, Then the worker stops taking work
    reconciler.run_once()
    assert intake.sent == ["cancel"] and intake.paused == {"slow link"}
    # and it reported its own round trip with its heartbeat
    assert float(probe.client.hget(probe.round_trips_key, runtime.owner) or 0) == 200.0
    # When work waits in the queue on two passes in a row, Then it takes work again
    CeleryDispatcher(app).send(Dispatch(1, "turn", 0))
    reconciler.run_once()
    assert intake.sent == ["cancel"]
    reconciler.run_once()
    assert intake.sent == ["cancel", "add"] and not intake.paused
    # When the queue is empty again and its link as fast as the others', Then it goes
    # on taking work
    probe.client.flushdb()
    for owner in ("h2:1", "h3:1"):
        probe.client.hset(probe.workers_key, owner, str(time.time()))
        probe.client.hset(probe.round_trips_key, owner, "0.5")
    monkeypatch.setattr(Reconciler, "_round_trip_ms", lambda self: 0.6)
    reconciler.run_once()
    assert intake.sent == ["cancel", "add"] and not intake.paused


def test_endings_a_dead_worker_left_uncounted_or_unclosed_are_finished_by_a_pass(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a run of two waves of two sessions whose worker died after committing both
    # endings of wave 1, having counted only the first of them, and another run whose
    # worker died after counting its wave full, before closing it
    monkeypatch.setattr("worker.fleet.reconciler.COUNT_AFTER_S", 0.0)
    run_id, ids = make_run(runtime.engine, waves="2x2")
    other_id, (other,) = make_run(runtime.engine)
    now = runtime.clock()
    with runtime.engine.begin() as conn:
        for sid in [*ids[:2], other]:
            assert end_session(conn, session_id=sid, outcome=Outcome.verified, now=now)
    count_endings(runtime.engine, now=now, session_ids=[ids[0]])
    with runtime.engine.begin() as conn:
        conn.execute(update(sessions).where(sessions.c.id == other).values(counted=True))
        conn.execute(update(waves).where(waves.c.run_id == other_id).values(done_count=1))
    # When a reconciler passes
    Reconciler(runtime).run_once()
    # Then the ending is counted, both waves are closed, and wave 2 of the first run is sent
    with runtime.engine.connect() as conn:
        rows = conn.execute(
            select(waves.c.run_id, waves.c.index, waves.c.done_count, waves.c.status).order_by(
                waves.c.run_id, waves.c.index
            )
        ).all()
    assert [tuple(r) for r in rows] == [
        (run_id, 1, 2, "finished"),
        (run_id, 2, 0, "running"),
        (other_id, 1, 1, "finished"),
    ]
    assert sorted(d.session_id for d in _sent(runtime)) == sorted(ids[2:])
