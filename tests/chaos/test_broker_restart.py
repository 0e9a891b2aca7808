"""Scenario 2: the broker (a Redis without persistence) restarts in the middle of a run.

Every message in Redis is lost; the database still says which turns are due, and the
workers' reconciler sends them again. The Redis is this test's own (see
:class:`~tests.chaos.services.PrivateRedis`): the machine's shared one is never touched.

Celery 5.7.0 with kombu 5.7.0's Redis transport does not survive this: a worker that
holds unacknowledged messages when the connection drops exits with "Unrecoverable error:
AttributeError: 'NoneType' object has no attribute 'hostname'" (one of two workers, in
each of eight trials). The workers run on :mod:`worker.fleet.redis_transport`, whose
channel closes quietly, so no worker may exit. They are still started with the systemd
unit's command line (``ops/systemd/swarm-worker@.service``) and supervised the same way,
``Restart=always`` being the second line; the test reports any restart the fault caused.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

import pytest
from sqlalchemy import Engine

from tests.chaos.checker import check_run
from tests.chaos.conftest import FAST_RECOVERY_ENV, RUN_TIMEOUT_S
from tests.chaos.progress import (
    turns_committed,
    turns_in_flight,
    wait_for_run,
    wait_until,
)
from tests.chaos.services import PrivateRedis, unit_worker_args
from tests.conftest import WorkerProcess, service_env
from worker.settings import Settings

pytestmark = [pytest.mark.chaos, pytest.mark.services, pytest.mark.slow]

#: Seconds the broker stays down.
DOWN_S = 2.0
#: Longest wait for the run to be under way before the broker is killed.
UNDER_WAY_TIMEOUT_S = 60.0
#: How long a worker must stay up after the broker came back to count as having survived.
SURVIVE_S = 8.0


def _redispatches(workers: list[WorkerProcess], marks: list[int]) -> int:
    return sum(
        "reconciler re-dispatching" in line
        for w, mark in zip(workers, marks, strict=True)
        for line in w.log[mark:]
    )


def test_run_completes_after_the_broker_loses_every_message(
    settings: Settings,
    engine: Engine,
    enqueue: Callable[..., int],
    private_redis: PrivateRedis,
    chaos_report: Callable[..., None],
) -> None:
    # Given the unit's two workers (sessions, verify) on a Redis of this test's own,
    # supervised as systemd does, and a 3x10 run under way
    broker = private_redis.url(0)
    env = service_env(settings, SWARM_BROKER_URL=broker, **FAST_RECOVERY_ENV)
    host = socket.gethostname()
    started: list[WorkerProcess] = []

    def start(instance: str) -> WorkerProcess:
        worker = WorkerProcess(env, unit_worker_args(instance, host)).start()
        started.append(worker)
        return worker

    instances = ["sessions", "verify"]
    workers = [start(i) for i in instances]
    try:
        _run_through_a_broker_restart(
            settings,
            engine,
            enqueue,
            private_redis,
            chaos_report,
            broker,
            workers,
            instances,
            start,
        )
    finally:
        for worker in started:
            worker.stop()


def _run_through_a_broker_restart(
    settings: Settings,
    engine: Engine,
    enqueue: Callable[..., int],
    private_redis: PrivateRedis,
    chaos_report: Callable[..., None],
    broker: str,
    workers: list[WorkerProcess],
    instances: list[str],
    start: Callable[[str], WorkerProcess],
) -> None:
    run_id = enqueue(settings.database_url, broker, "--wave", "3x10", "--sim-latency-ms", "300")
    wait_until(
        "15 committed turns", lambda: turns_committed(engine, run_id) >= 15, UNDER_WAY_TIMEOUT_S
    )
    turns_before, in_flight = turns_committed(engine, run_id), turns_in_flight(engine, run_id)
    # kombu keeps the messages workers hold, unacknowledged, in the "unacked" hash
    client = private_redis.client()
    held_before = sum(client.hlen(key) for key in client.scan_iter("*unacked"))
    redis_before = private_redis.server_run_id()
    marks = [len(w.log) for w in workers]
    # When Redis is killed and, after two seconds down, started again empty on the same port
    private_redis.restart(DOWN_S)
    redis_after = private_redis.server_run_id()
    exits: list[int | None] = []
    dead: list[WorkerProcess] = []

    def supervise() -> None:
        # What Restart=always does on a bare host (restart: unless-stopped under compose).
        for i, worker in enumerate(workers):
            if not worker.alive:
                exits.append(worker.stop())
                dead.append(worker)
                workers[i], marks[i] = start(instances[i]), 0

    wait_for_run(engine, run_id, RUN_TIMEOUT_S, tick=supervise)
    # Then the reconciler re-sent what the lost messages held, and the run completed whole
    figures = check_run(engine, run_id)
    redispatched = _redispatches(workers, marks)
    unrecoverable = sum("Unrecoverable error" in line for w in dead for line in w.log)
    chaos_report(
        figures,
        redis_restarts=private_redis.restarts,
        redis_run_id=f"{redis_before[:8]}->{redis_after[:8]}",
        messages_held_before=held_before,
        turns_before=turns_before,
        in_flight_at_restart=in_flight,
        worker_exits=exits,
        unrecoverable_errors=unrecoverable,
        reconciler_redispatch_passes=redispatched,
    )
    assert redis_after != redis_before and held_before >= 1
    assert exits == [] and unrecoverable == 0
    assert redispatched >= 1
    assert figures.clean, figures
    assert figures.status_count("succeeded") == 30
