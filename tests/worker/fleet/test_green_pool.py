"""A worker on a green pool (``-P gevent``): whole runs, the browser, CPU by greenlet, and
the pool that frees each task's greenlet as it ends."""

from __future__ import annotations

import gc
import signal
import time
import weakref
from collections.abc import Callable, Iterator
from types import SimpleNamespace

import gevent
import greenlet
import psutil
import pytest
from celery.concurrency.gevent import TaskPool as GeventPool
from sqlalchemy import Engine, func, select

from scheduler.cli.follow import until_finished
from tests.conftest import WorkerProcess
from tests.factories import duplicates, enqueue
from worker.celery import _fit_to_pool, create_app
from worker.fleet.green_pool import TaskPool
from worker.fleet.greenlets import GreenletCpu
from worker.settings import Settings
from worker.store.tables import runs, sessions, turn_timings, verifications

#: Seconds any whole run in these tests may take.
RUN_TIMEOUT_S = 240
#: CPU each greenlet burns in the clock's test.
BURN_S = 0.05
#: The model's latency in the reservation test: far longer than a worker takes to start.
SLOW_MODEL_MS = 20_000


@pytest.fixture
def clock() -> Iterator[GreenletCpu]:
    previous = greenlet.gettrace()
    yield GreenletCpu()
    greenlet.settrace(previous)


def test_a_task_s_greenlet_is_freed_as_its_task_ends() -> None:
    # Given the green pool, with the cyclic collector off
    pool = TaskPool(limit=4)
    pool.start()
    results: list[int] = []
    gc.collect()
    gc.disable()
    try:
        # When three tasks run to their end, one of them told to terminate while it runs
        ended = []
        for n in range(3):
            task = pool.on_apply(lambda n: n * 2, args=(n,), callback=results.append)
            if n == 0:
                task.terminate(signal.SIGTERM)
            ended.append(weakref.ref(task))
            del task
        gevent.sleep(0.01)
        # Then each ran, and its greenlet is gone with its last reference, not left to a
        # collection
        assert sorted(results) == [0, 2, 4]
        assert [task() for task in ended] == [None, None, None]
        assert not pool._pool_map
    finally:
        gc.enable()
        pool.stop()


def test_the_green_pool_still_terminates_a_running_task() -> None:
    # Given a task of the green pool that waits
    pool = TaskPool(limit=2)
    pool.start()
    done: list[object] = []
    task = pool.on_apply(gevent.sleep, args=(30,), callback=done.append)
    gevent.sleep(0)
    # When the pool is asked to terminate it, as a revoke does
    pool.terminate_job(id(task), signal.SIGTERM)
    # Then it ends at once, as a killed task
    task.join(timeout=5)
    assert task.dead
    assert done == [(False, None, None)]
    pool.stop()


def _burn(seconds: float) -> None:
    started = time.thread_time()
    while time.thread_time() - started < seconds:
        pass


def test_each_greenlet_is_charged_its_own_cpu(clock: GreenletCpu) -> None:
    # Given two greenlets of one thread that take turns burning CPU
    seen: dict[str, float] = {}

    def first() -> None:
        start = clock()
        _burn(BURN_S)
        other.switch()  # the other burns while this one waits
        _burn(BURN_S)
        seen["first"] = clock() - start

    def second() -> None:
        start = clock()
        _burn(3 * BURN_S)
        one.switch()
        seen["second"] = clock() - start

    one, other = greenlet.greenlet(first), greenlet.greenlet(second)
    # When both run to the end
    one.switch()
    other.switch()
    # Then each was charged the CPU it burnt, not the other's
    assert 2 * BURN_S <= seen["first"] < 3 * BURN_S
    assert 3 * BURN_S <= seen["second"] < 4 * BURN_S


@pytest.mark.services
def test_a_worker_on_celery_s_gevent_pool_takes_the_freeing_pool_and_no_spawn_trees(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a worker about to start on Celery's gevent pool, gevent tracking spawn trees
    monkeypatch.setattr(gevent.config, "track_greenlet_tree", True)
    assert gevent.spawn(lambda: None).spawning_stack is not None
    worker = SimpleNamespace(app=create_app(settings), pool_cls=GeventPool, concurrency=10)
    previous = greenlet.gettrace()
    try:
        # When it fits itself to its pool
        _fit_to_pool(worker)
    finally:
        greenlet.settrace(previous)
    # Then it runs the pool that frees each task's greenlet, and its greenlets carry no
    # record of who spawned them
    assert worker.pool_cls is TaskPool
    assert gevent.spawn(lambda: None).spawning_stack is None


@pytest.mark.services
@pytest.mark.slow
def test_a_gevent_worker_runs_a_swarm_and_charges_each_turn_its_own_cpu(
    settings: Settings, engine: Engine, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given a worker whose tasks are greenlets of one thread, 200 slots
    worker = start_worker(pool="gevent", concurrency=200)
    assert worker.proc is not None
    cpu_before = psutil.Process(worker.proc.pid).cpu_times()
    # When a 2x40 run with a slow model is enqueued and followed to its end
    run_id = enqueue(settings, "--wave", "2x40", "--sim-latency-ms", "300")
    status = until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
    cpu_after = psutil.Process(worker.proc.pid).cpu_times()
    # Then every session succeeded, and nothing was committed twice
    assert status.sessions.succeeded == 80, status
    assert duplicates(engine) == {"usage": 0, "model_events": 0, "version_gaps": 0}
    assert not worker.errors(), worker.errors()
    # And no message was delivered twice: forty greenlets acking at once found a broker
    # connection each, where kombu's default pool of ten would have failed their acks
    assert not [line for line in worker.log if "Couldn't ack" in line]
    with engine.connect() as conn:
        sent_again = conn.execute(
            select(runs.c.duplicate_turn_tasks).where(runs.c.id == run_id)
        ).scalar_one()
    assert sent_again == 0
    # And the turns' CPU adds up to no more than the worker spent: each turn was charged its
    # own greenlet's CPU, not that of the turns that ran while it waited for the model
    with engine.connect() as conn:
        turns_cpu_ms = conn.execute(
            select(func.sum(turn_timings.c.cpu_ms)).where(turn_timings.c.run_id == run_id)
        ).scalar_one()
    worker_cpu_ms = 1000 * (
        (cpu_after.user + cpu_after.system) - (cpu_before.user + cpu_before.system)
    )
    assert 0 < turns_cpu_ms <= worker_cpu_ms
    # And the worker ran its tasks on the pool that frees each task's greenlet as it ends
    stats = create_app(settings).control.inspect(timeout=5).stats() or {}
    assert [s["pool"]["implementation"] for s in stats.values()] == [
        "worker.fleet.green_pool:TaskPool"
    ], stats


@pytest.mark.services
@pytest.mark.slow
@pytest.mark.browser
def test_a_gevent_worker_judges_pages_in_chromium(
    settings: Settings, engine: Engine, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given a gevent worker that judges artifacts in the browser
    start_worker(pool="gevent", concurrency=50, SWARM_VERIFIER="browser")
    # When a 1x3 run is followed to its end
    run_id = enqueue(settings, "--wave", "1x3", "--sim-latency-ms", "20")
    status = until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
    # Then every artifact passed in Chromium, with a screenshot
    assert status.sessions.succeeded == 3, status
    with engine.connect() as conn:
        rows = conn.execute(
            select(verifications.c.method, verifications.c.screenshot_png)
            .join(sessions)
            .where(sessions.c.run_id == run_id, verifications.c.passed)
        ).all()
    assert len(rows) == 3
    assert all(r.method == "browser" and r.screenshot_png for r in rows)


def _first_turns(engine: Engine, run_id: int) -> tuple[int, int]:
    """Sessions of the run whose first turn was claimed, and turns committed so far."""
    with engine.connect() as conn:
        claimed, committed = conn.execute(
            select(
                func.count().filter(
                    sessions.c.lease_owner.is_not(None) | (sessions.c.next_turn > 0)
                ),
                func.coalesce(func.sum(sessions.c.next_turn), 0),
            ).where(sessions.c.run_id == run_id)
        ).one()
    return int(claimed), int(committed)


@pytest.mark.services
@pytest.mark.slow
def test_a_gevent_worker_leaves_what_it_has_no_slot_for_to_a_worker_with_one(
    settings: Settings, engine: Engine, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given a gevent worker with two slots, and three first turns of a slow model queued
    start_worker(pool="gevent", concurrency=2)
    run_id = enqueue(settings, "--wave", "1x3", "--sim-latency-ms", str(SLOW_MODEL_MS))
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while _first_turns(engine, run_id)[0] < 2:
        assert time.monotonic() < deadline, "the first worker never claimed two turns"
        time.sleep(0.05)
    # When a second worker with free slots starts
    start_worker(pool="gevent", concurrency=2)
    # Then it takes the third first turn while the first worker's two are still with the
    # model: the first worker did not hold it back, waiting for a slot of its own
    while (seen := _first_turns(engine, run_id))[0] < 3:
        assert time.monotonic() < deadline, "the third first turn was never claimed"
        time.sleep(0.05)
    assert seen == (3, 0), "the third first turn waited for a turn of the first worker to end"
