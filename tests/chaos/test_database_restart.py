"""Scenario 3: PostgreSQL restarts (fast shutdown) in the middle of a run.

Every connection is cut and every open transaction rolled back, including turn commits in
flight. A task that meets a dropped connection is sent again, not failed, and its worker
takes no work until the database answers again (:mod:`worker.fleet.outage`). The cluster
is this test's own (see :class:`~tests.chaos.services.PrivateCluster`): the machine's
shared PostgreSQL is never touched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

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
from tests.chaos.services import PrivateCluster
from tests.conftest import WorkerProcess
from worker.settings import Settings
from worker.store.engine import make_engine

pytestmark = [pytest.mark.chaos, pytest.mark.services, pytest.mark.slow]

#: Longest wait for the run to be under way, or for the workers to reconnect.
UNDER_WAY_TIMEOUT_S = 60.0


@pytest.fixture
def private_engine(private_pg: tuple[PrivateCluster, str]) -> Iterator[Engine]:
    """An engine on the private cluster's database."""
    engine = make_engine(Settings(database_url=private_pg[1]))
    yield engine
    engine.dispose()


def test_run_completes_across_a_database_restart(
    settings: Settings,
    private_pg: tuple[PrivateCluster, str],
    private_engine: Engine,
    enqueue: Callable[..., int],
    start_worker: Callable[..., WorkerProcess],
    chaos_report: Callable[..., None],
) -> None:
    # Given two workers on a PostgreSQL cluster of this test's own, and a 3x10 run under way
    cluster, url = private_pg
    workers = [
        start_worker(concurrency=10, SWARM_DATABASE_URL=url, **FAST_RECOVERY_ENV) for _ in range(2)
    ]
    run_id = enqueue(url, settings.broker_url, "--wave", "3x10", "--sim-latency-ms", "300")
    engine = private_engine
    wait_until(
        "15 committed turns and turns in flight",
        lambda: turns_committed(engine, run_id) >= 15 and turns_in_flight(engine, run_id) >= 2,
        UNDER_WAY_TIMEOUT_S,
    )
    in_flight = turns_in_flight(engine, run_id)
    started_before = cluster.started_at()
    backends_before = cluster.backend_pids("swarm_chaos")
    marks = [len(w.log) for w in workers]
    # When the cluster restarts with a fast shutdown (open transactions rolled back)
    cluster.restart()
    started_after = cluster.started_at()
    wait_until(
        "the workers' reconnection",
        lambda: bool(cluster.backend_pids("swarm_chaos") - backends_before),
        UNDER_WAY_TIMEOUT_S,
    )
    backends_after = cluster.backend_pids("swarm_chaos")
    wait_for_run(engine, run_id, RUN_TIMEOUT_S)
    # Then the workers reconnected, no turn is visible in part, and the run completed whole
    figures = check_run(engine, run_id)
    logs = [line for w, mark in zip(workers, marks, strict=True) for line in w.log[mark:]]
    failed_tasks = sum("raised unexpected" in line for line in logs)
    sent_again = sum("database unreachable (" in line for line in logs)
    paused = sum("stops taking work" in line for line in logs)
    chaos_report(
        figures,
        pg_restarts=cluster.restarts,
        postmaster_start=f"{started_before:%H:%M:%S.%f}->{started_after:%H:%M:%S.%f}",
        backends_before=len(backends_before),
        backends_after=len(backends_after),
        shared_backends=len(backends_before & backends_after),
        in_flight_at_restart=in_flight,
        tasks_failed_by_restart=failed_tasks,
        tasks_sent_again=sent_again,
        workers_paused=paused,
    )
    assert started_after > started_before
    # A task that met a dropped connection was sent again, never failed
    assert failed_tasks == 0
    assert backends_before and not backends_before & backends_after
    assert figures.partial_turns == 0 and figures.orphan_usage == 0
    assert figures.fenced_writes == 0
    assert figures.clean, figures
    assert figures.status_count("succeeded") == 30
    assert all(w.alive for w in workers)
