"""Scenario 2: the broker (a Redis without persistence) restarts in the middle of a run.

Every message in Redis is lost; the database still says which turns are due, and the
workers' reconciler sends them again. The Redis is this test's own (see
:class:`~tests.chaos.services.PrivateRedis`): the machine's shared one is never touched.

Celery 5.7.0 with kombu 5.7.0 does not survive this: a worker that holds unacknowledged
messages when the connection drops exits with "Unrecoverable error: AttributeError:
'NoneType' object has no attribute 'hostname'". Its consumer first ``collect()``s the
broken connection (which clears the transport's client) and then ``close()``s it; closing
the channel restores the unacknowledged messages through that cleared client, and the
AttributeError escapes ``ignore_errors``. It is a race (here at least one of two workers
died in each of eight trials, a lone worker survived three of three), so no test asserts it.
Deployments restart dead workers (compose's ``restart: unless-stopped``); this test
supervises its workers the same way, holds the database-side promise, and reports how many
workers the restart killed.
"""

from __future__ import annotations

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
from tests.chaos.services import PrivateRedis
from tests.conftest import WorkerProcess
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
    start_worker: Callable[..., WorkerProcess],
    chaos_report: Callable[..., None],
) -> None:
    # Given two supervised workers on a Redis of this test's own, and a 3x10 run under way
    broker = private_redis.url(0)

    def start() -> WorkerProcess:
        return start_worker(concurrency=10, SWARM_BROKER_URL=broker, **FAST_RECOVERY_ENV)

    workers = [start(), start()]
    run_id = enqueue(settings.database_url, broker, "--wave", "3x10", "--sim-latency-ms", "300")
    wait_until(
        "15 committed turns", lambda: turns_committed(engine, run_id) >= 15, UNDER_WAY_TIMEOUT_S
    )
    turns_before, in_flight = turns_committed(engine, run_id), turns_in_flight(engine, run_id)
    # kombu keeps the messages workers hold, unacknowledged, in the "unacked" hash
    held_before = private_redis.client().hlen("unacked")
    redis_before = private_redis.server_run_id()
    marks = [len(w.log) for w in workers]
    # When Redis is killed and, after two seconds down, started again empty on the same port
    private_redis.restart(DOWN_S)
    redis_after = private_redis.server_run_id()
    exits: list[int | None] = []
    dead: list[WorkerProcess] = []

    def supervise() -> None:
        # What `restart: unless-stopped` does for the compose fleet.
        for i, worker in enumerate(workers):
            if not worker.alive:
                exits.append(worker.stop())
                dead.append(worker)
                workers[i], marks[i] = start(), 0

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
    assert redispatched >= 1
    assert figures.clean, figures
    assert figures.status_count("succeeded") == 30
