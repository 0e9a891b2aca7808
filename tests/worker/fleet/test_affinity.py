"""Session affinity: a worker's own queue of its sessions' next turns, counted by the fleet
and handed back to the shared queue once its worker is gone."""

from __future__ import annotations

import re
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any, cast

import pytest
from sqlalchemy import Engine

from scheduler.cli.follow import until_finished
from tests.conftest import WorkerProcess
from tests.factories import duplicates, enqueue
from tests.worker.fleet.conftest import dead_pid
from worker.fleet import broker
from worker.fleet.broker import RedisBrokerProbe, own_queue
from worker.fleet.dispatch import CeleryDispatcher
from worker.fleet.identity import process_owner
from worker.settings import SESSIONS_QUEUE, Settings
from worker.store.due import Dispatch

pytestmark = [pytest.mark.services, pytest.mark.usefixtures("empty_broker")]

#: Seconds any whole run in these tests may take.
RUN_TIMEOUT_S = 120
#: Celery's line for each task a worker receives (``SWARM_TASK_LOG``).
_RECEIVED = re.compile(r"Task swarm\.turn\[turn:(\d+):(\d+)\] received")


def _send_to(app: Any, queue: str, *items: Dispatch) -> None:
    dispatcher = CeleryDispatcher(app, own_queue=lambda: queue)
    for item in items:
        dispatcher.send(item)


def _record(probe: RedisBrokerProbe, owner: str, *, beat_at: float | None) -> str:
    """Record ``owner``'s own queue with the fleet, beating at ``beat_at`` (None: signed off)."""
    queue = own_queue(owner)
    probe.client.hset(probe.own_queues_key, queue, owner)
    if beat_at is not None:
        probe.client.hset(probe.workers_key, owner, str(beat_at))
    return queue


def _ran_on(workers: list[WorkerProcess]) -> tuple[dict[int, set[int]], int]:
    """Which of ``workers`` (by index) received each session's turns, and how many turns
    they received in all, as their logs say."""
    ran_on: dict[int, set[int]] = defaultdict(set)
    turns = 0
    for n, worker in enumerate(workers):
        for line in worker.log:
            if (match := _RECEIVED.search(line)) is not None:
                ran_on[int(match.group(1))].add(n)
                turns += 1
    return ran_on, turns


def _waiting(probe: RedisBrokerProbe, queue: str) -> int:
    return sum(int(probe.client.llen(key)) for key in probe._lists_of(queue))


def test_the_queues_of_workers_gone_go_back_to_the_head_of_the_shared_queue(
    app: Any, probe: RedisBrokerProbe
) -> None:
    # Given this worker's own queue, and the own queues of a live worker, of one that fell
    # silent, of one that signed off and of a dead process of this host, each holding a
    # next turn, and a first turn waiting in the shared queue
    now = time.time()
    probe.own_queue = own_queue(probe.owner)
    assert probe.register()
    probe.heartbeat()
    mine = probe.own_queue
    assert mine is not None
    live = _record(probe, "live-host:1", beat_at=now)
    silent = _record(probe, "silent-host:2", beat_at=now - 2 * probe.silence_s)
    signed_off = _record(probe, "gone-host:3", beat_at=None)
    dead = _record(probe, process_owner(dead_pid()), beat_at=now)
    for n, queue in enumerate([mine, live, silent, signed_off, dead], start=1):
        _send_to(app, queue, Dispatch(n, "turn", 1))
    _send_to(app, SESSIONS_QUEUE, Dispatch(9, "turn", 0))
    # Then the fleet counts every one of them as waiting, not lost
    view = probe.view() or pytest.fail("no view")
    assert view.queued == {f"turn:{n}:1" for n in range(1, 6)} | {"turn:9:0"}
    # When the fleet's reconciler sweeps
    assert probe.sweep() == 3
    # Then the three gone workers' turns wait in the shared queue, ahead of its first turn,
    # and the live workers keep theirs
    assert [_waiting(probe, q) for q in (mine, live, silent, signed_off, dead)] == [1, 1, 0, 0, 0]
    head = f"{probe.prefix}{SESSIONS_QUEUE}"
    moved = broker._ids(cast(list[bytes], probe.client.lrange(head, 0, -1)))
    assert sorted(moved) == ["turn:3:1", "turn:4:1", "turn:5:1"]
    assert (probe.view() or pytest.fail("no view")).queued == view.queued
    # When this worker takes no work, Then its own queue goes back too
    assert probe.sweep(own_too=True) == 1
    assert _waiting(probe, mine) == 0
    # and a sweep finds nothing more to move
    assert probe.sweep() == 0


def test_a_queue_whose_worker_is_long_gone_is_forgotten(app: Any, probe: RedisBrokerProbe) -> None:
    # Given the own queue of a worker that signed off, found gone by a sweep
    gone = _record(probe, "long-gone-host:5", beat_at=None)
    _send_to(app, gone, Dispatch(1, "turn", 1))
    assert probe.sweep() == 1
    binding = f"{probe.prefix}_kombu.binding.{gone}"
    assert probe.client.exists(binding)
    # When a message it held comes back to it later (kombu's visibility timeout)
    _send_to(app, gone, Dispatch(1, "turn", 2))
    # Then the next sweep hands that one back too, and the queue is still on record
    assert probe.sweep() == 1
    assert probe.client.hexists(probe.own_queues_key, gone)
    # When it has been gone for longer than the forgetting delay
    found_gone_at = time.time() - broker.FORGET_QUEUE_AFTER_S - 1
    probe.client.hset(probe.gone_key, gone, str(found_gone_at))
    probe.sweep()
    # Then the fleet forgets it: no record, no binding
    assert not probe.client.hexists(probe.own_queues_key, gone)
    assert not probe.client.hexists(probe.gone_key, gone)
    assert not probe.client.exists(binding)


@pytest.mark.slow
def test_a_session_s_turns_stay_on_the_worker_that_ran_its_first(
    settings: Settings, engine: Engine, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given two workers of eight slots each, logging every task they receive
    workers = [start_worker(concurrency=8, SWARM_TASK_LOG="1") for _ in range(2)]
    # When a run of twelve sessions (several turns each) runs to its end: neither worker
    # can hold them all, and both have slots free for any session's next turn
    run_id = enqueue(settings, "--wave", "1x12", "--sim-latency-ms", "200")
    status = until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
    assert status.sessions.succeeded == 12
    assert duplicates(engine) == {"usage": 0, "model_events": 0, "version_gaps": 0}
    # Then each session's turns all ran on one worker, and both workers ran sessions
    ran_on, turns = _ran_on(workers)
    assert len(ran_on) == 12 and turns >= 3 * 12
    assert all(len(on) == 1 for on in ran_on.values()), dict(ran_on)
    assert {n for on in ran_on.values() for n in on} == {0, 1}
    assert all(w.errors() == [] for w in workers)


@pytest.mark.slow
def test_without_affinity_a_session_s_turns_go_to_any_worker(
    settings: Settings, engine: Engine, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given two workers as above, with session affinity off
    workers = [
        start_worker(concurrency=4, SWARM_TASK_LOG="1", SWARM_SESSION_AFFINITY="false")
        for _ in range(2)
    ]
    # When the same run runs to its end
    run_id = enqueue(settings, "--wave", "1x12", "--sim-latency-ms", "200")
    status = until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
    assert status.sessions.succeeded == 12
    # Then some session's turns ran on both (the check above is not a given)
    ran_on, _ = _ran_on(workers)
    assert any(len(on) == 2 for on in ran_on.values()), dict(ran_on)
