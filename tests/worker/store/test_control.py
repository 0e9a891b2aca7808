"""Cancel and resume: what ends at once, what finishes first, what is sent again."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from scheduler.cli import cli
from scheduler.cli.follow import until_finished
from tests.conftest import WorkerProcess
from tests.factories import ScriptedModel, call, make_run, model_turn
from worker.agent.turn import run_turn
from worker.config import RunConfig
from worker.errors import InputError
from worker.fleet.runtime import Runtime
from worker.runs.ladders import create_ladder
from worker.settings import Settings
from worker.store.claims import lease_turn
from worker.store.control import cancel_run, resume_run
from worker.store.endings import count_endings
from worker.store.tables import ladders, runs, sessions
from worker.store.waves import take_outbox

pytestmark = pytest.mark.services


def _states(rt: Runtime, run_id: int) -> dict[int, tuple[str, str | None]]:
    with rt.engine.connect() as conn:
        rows = conn.execute(
            select(sessions.c.index, sessions.c.status, sessions.c.outcome).where(
                sessions.c.run_id == run_id
            )
        ).all()
    return {index: (status, outcome) for index, status, outcome in rows}


def _run(rt: Runtime, run_id: int) -> Any:
    with rt.engine.connect() as conn:
        return conn.execute(select(runs).where(runs.c.id == run_id)).one()


def test_cancel_ends_idle_sessions_now_and_lets_a_turn_in_flight_finish(runtime: Runtime) -> None:
    # Given a 2x2 run: session 0 is in the middle of a turn, session 1 between turns,
    # and wave 2 has not started
    run_id, (s0, *_) = make_run(runtime.engine, waves="2x2")
    with runtime.engine.begin() as conn:
        claim = lease_turn(conn, session_id=s0, turn_no=0, owner="w", now=runtime.clock(), ttl_s=60)
    assert claim is not None
    # When the run is cancelled, and the endings counted once committed (as `cancel` does)
    with runtime.engine.begin() as conn:
        done = cancel_run(conn, run_id=run_id, now=runtime.clock())
    count_endings(runtime.engine, now=runtime.clock())
    # Then everything but the turn in flight ended at once, and no wave 2 was started
    assert (done.ended, done.in_flight) == (3, 1)
    assert _states(runtime, run_id) == {
        0: ("running", None),
        1: ("cancelled", "cancelled"),
        2: ("cancelled", "cancelled"),
        3: ("cancelled", "cancelled"),
    }
    assert _run(runtime, run_id).finished_at is None
    # and when that session would start its next turn, it ends too and the run is over
    with runtime.engine.begin() as conn:  # its worker finished the turn and let go
        conn.execute(
            sessions.update().where(sessions.c.id == s0).values(lease_expires_at=None, next_turn=1)
        )
    outcome = run_turn(
        rt=runtime,
        session_id=s0,
        turn_no=1,
        model=ScriptedModel([model_turn(call("plan_manage", action="list"))]),
    )
    assert outcome.value == "ended"
    assert _states(runtime, run_id)[0] == ("cancelled", "cancelled")
    run = _run(runtime, run_id)
    assert (run.status, run.stop_reason) == ("cancelled", "cancelled by a user")
    assert run.finished_at is not None


def test_a_finished_run_cannot_be_cancelled_or_resumed(runtime: Runtime) -> None:
    run_id, _ = make_run(runtime.engine)
    with runtime.engine.begin() as conn:
        conn.execute(runs.update().where(runs.c.id == run_id).values(status="finished"))
    with runtime.engine.begin() as conn, pytest.raises(InputError, match="already finished"):
        cancel_run(conn, run_id=run_id, now=runtime.clock())
    with runtime.engine.begin() as conn, pytest.raises(InputError, match="already finished"):
        resume_run(conn, run_id=run_id, now=runtime.clock())


def test_resume_sends_what_has_not_ended(runtime: Runtime) -> None:
    run_id, (s0, s1) = make_run(runtime.engine, waves="1x2")
    with runtime.engine.begin() as conn:
        conn.execute(
            sessions.update()
            .where(sessions.c.id == s1)
            .values(status="verifying", repair_round=1, next_turn=4)
        )
        dispatches = resume_run(conn, run_id=run_id, now=runtime.clock())
    assert [(d.session_id, d.kind, d.number) for d in dispatches] == [
        (s0, "turn", 0),
        (s1, "verify", 1),
    ]


@pytest.mark.slow
def test_resume_completes_a_run_whose_messages_were_lost(
    settings: Settings, runtime: Runtime, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given a worker whose reconciler would wait ten minutes, and a run whose first
    # messages never reached the broker
    start_worker(SWARM_REDISPATCH_AFTER_S="600")
    run_id, _ = make_run(runtime.engine, waves="2x2", sim_latency_ms=20)
    # When a user resumes it
    result = CliRunner().invoke(
        cli,
        [
            "--database-url",
            settings.database_url,
            "--broker-url",
            settings.broker_url,
            "resume",
            str(run_id),
        ],
    )
    # Then the stuck sessions were sent again and the run completes
    assert result.exit_code == 0, result.output
    assert "2 turns and 0 verifications dispatched" in result.output
    status = until_finished(runtime.engine, run_id, show=False, timeout_s=120)
    assert status.sessions.succeeded == 4


def test_cancel_from_the_cli(settings: Settings, runtime: Runtime) -> None:
    run_id, _ = make_run(runtime.engine, waves="1x3")
    result = CliRunner().invoke(
        cli, ["--database-url", settings.database_url, "cancel", str(run_id)]
    )
    assert result.exit_code == 0, result.output
    assert "3 sessions ended now, 0 end after" in result.output
    status = until_finished(runtime.engine, run_id, show=False, timeout_s=10)
    assert status.sessions.cancelled == 3


def test_cancelling_a_ladder_stops_its_run_and_every_tier_to_come(
    settings: Settings, runtime: Runtime
) -> None:
    # Given a ladder whose first tier is running and whose second has not started
    with runtime.engine.begin() as conn:
        ladder_id, run_ids = create_ladder(
            conn,
            model="sim",
            tiers=("2", "1x3"),
            profiles=("candidate",),
            config=RunConfig(waves="2", sim_latency_ms=0),
            now=runtime.clock(),
        )
        take_outbox(conn, now=runtime.clock())
    # When it is cancelled from the CLI
    result = CliRunner().invoke(
        cli, ["--database-url", settings.database_url, "cancel", f"L{ladder_id}"]
    )
    # Then every session of both runs ended, and neither the ladder nor a run goes on
    assert result.exit_code == 0, result.output
    assert f"ladder L{ladder_id} cancelled: 5 sessions ended now, 0 end after" in result.output
    for run_id in run_ids:
        assert set(_states(runtime, run_id).values()) == {("cancelled", "cancelled")}
        run = _run(runtime, run_id)
        assert run.status == "cancelled" and run.finished_at is not None
    with runtime.engine.connect() as conn:
        assert (
            conn.execute(select(ladders.c.status).where(ladders.c.id == ladder_id)).scalar()
            == "cancelled"
        )
        assert (
            conn.execute(select(runs.c.started_at).where(runs.c.id == run_ids[1])).scalar() is None
        )
