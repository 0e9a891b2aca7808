"""Whole runs on a real Celery worker (threads pool), real Redis and real PostgreSQL."""

from __future__ import annotations

import itertools
import json
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, func, select

from scheduler.cli import cli
from scheduler.cli.follow import until_finished
from tests.conftest import WorkerProcess
from tests.factories import duplicates, enqueue, make_run
from worker.fleet.dispatch import CeleryDispatcher
from worker.settings import Settings
from worker.store.due import Dispatch
from worker.store.tables import artifact_versions, artifacts, sessions, usage

pytestmark = [pytest.mark.services, pytest.mark.slow]

#: Seconds any whole run in these tests may take.
RUN_TIMEOUT_S = 120


def test_3x4_run_succeeds_in_wave_order(
    settings: Settings, engine: Engine, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given a worker on the threads pool
    worker = start_worker()
    # When a 3x4 run is enqueued and followed to its end
    run_id = enqueue(settings, "--wave", "3x4", "--sim-latency-ms", "50")
    status = until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
    # Then all 12 sessions succeeded, each with one artifact and its version history
    assert status.sessions.succeeded == 12, status
    assert status.artifacts.total == 12
    assert status.artifacts.verified == 12
    with engine.connect() as conn:
        per_session = conn.execute(
            select(artifacts.c.session_id, func.count(artifact_versions.c.id))
            .join(artifact_versions)
            .group_by(artifacts.c.session_id)
        ).all()
    assert len(per_session) == 12
    assert all(n >= 2 for _, n in per_session)  # created, then a region edited in place
    # and wave k+1 started only after wave k finished
    waves = status.waves
    assert [w.index for w in waves] == [1, 2, 3]
    for earlier, later in itertools.pairwise(waves):
        assert earlier.finished_at is not None and later.started_at is not None
        assert earlier.finished_at <= later.started_at
    assert status.tokens.cached > 0 and status.cost_usd > 0
    assert duplicates(engine) == {"usage": 0, "model_events": 0, "version_gaps": 0}
    assert worker.errors() == []


def test_duplicated_turn_messages_are_harmless(
    settings: Settings, engine: Engine, app: Any, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given a run whose first turns are each delivered three times
    start_worker()
    run_id, ids = make_run(engine, waves="1x4", sim_latency_ms=30)
    dispatcher = CeleryDispatcher(app)
    for _ in range(3):
        for sid in ids:
            dispatcher.send(Dispatch(sid, "turn", 0))
    # When the run completes
    status = until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
    # Then every turn committed once: one usage row per turn, versions without gaps
    assert status.sessions.succeeded == 4
    assert duplicates(engine) == {"usage": 0, "model_events": 0, "version_gaps": 0}
    with engine.connect() as conn:
        turns = conn.execute(
            select(func.sum(sessions.c.next_turn)).where(sessions.c.run_id == run_id)
        ).scalar_one()
        rows = conn.execute(
            select(func.count()).select_from(usage).where(usage.c.run_id == run_id)
        ).scalar_one()
    assert rows == turns


def test_lost_messages_are_redispatched_by_the_reconciler(
    settings: Settings, engine: Engine, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given a run whose wave 1 started in the database but whose messages never reached Redis
    start_worker()
    run_id, _ = make_run(engine, waves="2x3", sim_latency_ms=30)
    # When nobody sends anything, the workers' reconciler finds the due sessions
    status = until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
    # Then the run still completes
    assert status.sessions.succeeded == 6


def test_misbehaving_personas_never_crash_the_worker(
    settings: Settings, engine: Engine, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given sloppy, explorer and markdown agents
    worker = start_worker()
    run_id = enqueue(
        settings,
        "--wave",
        "1x9",
        "--sim-latency-ms",
        "10",
        "--sim-mix",
        "sloppy,explorer,markdown",
        "--max-turns",
        "12",
    )
    status = until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
    # Then every session ended in a recorded state, the misbehaviour shows as tool errors,
    # and the worker is alive with no task that raised
    sessions_ = status.sessions
    assert sessions_.ended == 9
    assert sessions_.succeeded + sessions_.stopped == 9
    kinds = set(status.tool_errors.by_kind) | set(status.nudges.by_reason)
    assert {"no_tool_call", "not_found"} <= kinds
    assert kinds & {"bad_arguments", "too_large", "unknown_tool", "conflict", "region_not_found"}
    assert worker.alive and worker.errors() == []
    with engine.connect() as conn:
        ended = conn.execute(
            select(sessions.c.status, sessions.c.outcome).where(sessions.c.run_id == run_id)
        ).all()
    assert all(outcome for _, outcome in ended)


def test_status_json_has_the_documented_shape(
    settings: Settings, engine: Engine, start_worker: Callable[..., WorkerProcess]
) -> None:
    start_worker()
    run_id = enqueue(settings, "--wave", "1x2", "--sim-latency-ms", "10")
    until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
    result = CliRunner().invoke(
        cli,
        ["--database-url", settings.database_url, "status", str(run_id), "--json"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0
    status = json.loads(result.output)
    assert status["run_id"] == run_id and status["status"] == "finished"
    assert {"total", "succeeded", "failed", "stopped", "error"} <= set(status["sessions"])
    assert {"index", "status", "done", "started_at", "finished_at"} <= set(status["waves"][0])
    assert {"artifacts", "tool_errors", "nudges", "tokens", "cost_usd"} <= set(status)
    assert status["tokens"]["prompt"] > status["tokens"]["cached"] > 0


def test_a_warm_shutdown_finishes_its_turns_and_hands_the_run_on(
    settings: Settings, engine: Engine, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given a worker with turns in flight (each model call takes about a second)
    first = start_worker()
    run_id = enqueue(settings, "--wave", "1x4", "--sim-latency-ms", "1000")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            leased = conn.execute(
                select(func.count())
                .select_from(sessions)
                .where(sessions.c.run_id == run_id, sessions.c.lease_owner.is_not(None))
            ).scalar_one()
        if leased:
            break
        time.sleep(0.05)  # polling the database for the state to reach, bounded above
    assert leased, "no turn was in flight"
    # When it is asked to stop (SIGTERM: Celery's warm shutdown)
    assert first.proc is not None
    pid = first.proc.pid
    code = first.stop(signal.SIGTERM)
    # Then it exited cleanly, holding no lease: its turns committed or were handed back
    assert code == 0
    with engine.connect() as conn:
        held = conn.execute(
            select(func.count())
            .select_from(sessions)
            .where(sessions.c.lease_owner.like(f"%:{pid}"))
        ).scalar_one()
    assert held == 0
    assert first.errors() == []
    # and another worker finishes the run without a duplicated turn
    start_worker()
    status = until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
    assert status.sessions.succeeded == 4
    assert duplicates(engine) == {"usage": 0, "model_events": 0, "version_gaps": 0}
