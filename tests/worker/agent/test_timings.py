"""The timing ledger: one row per committed turn, written with its commit, and the count of
turn tasks that found nothing to do."""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy import select

from tests.factories import ScriptedModel, call, make_run, model_turn, page
from worker.agent.timings import TurnTimer
from worker.agent.turn import run_turn
from worker.errors import ModelUnavailable
from worker.fleet.runtime import Runtime
from worker.models.base import ModelRequest
from worker.store.tables import runs, turn_timings, usage

pytestmark = pytest.mark.services


def _ledger(rt: Runtime, session_id: int) -> list[Any]:
    with rt.engine.connect() as conn:
        return list(
            conn.execute(
                select(turn_timings)
                .where(turn_timings.c.session_id == session_id)
                .order_by(turn_timings.c.turn_no)
            ).all()
        )


def _duplicates(rt: Runtime, run_id: int) -> int:
    with rt.engine.connect() as conn:
        return int(
            conn.execute(
                select(runs.c.duplicate_turn_tasks).where(runs.c.id == run_id)
            ).scalar_one()
        )


def test_timer_charges_each_lap_to_its_phase() -> None:
    # Given a timer with two laps of one phase around a lap of another
    timer = TurnTimer()
    timer.lap("claim")
    time.sleep(0.02)  # the measured interval itself, not a wait for work
    timer.lap("model")
    timer.lap("commit")
    timer.lap("commit")
    # Then the sleep is charged to the model, and the laps of a phase add up
    assert timer.ms("model") >= 19
    assert timer.ms("commit") < 5
    assert timer.ms("tools") == 0.0
    assert timer.cpu_ms() >= 0


def test_each_committed_turn_gets_one_row_with_its_commit(runtime: Runtime) -> None:
    # Given a session whose model takes about 50 ms per call
    run_id, (sid,) = make_run(runtime.engine)
    turns = [
        model_turn(call("plan_manage", action="set", items=["a"])),
        model_turn(call("manage_artifact", action="create", name="d.html", content=page())),
    ]

    def slow(_: ModelRequest) -> None:
        time.sleep(0.05)  # the model's latency being measured

    model = ScriptedModel(turns, before=slow)
    # When both turns run in this process, turn 1 sent by turn 0
    outcomes = [run_turn(rt=runtime, session_id=sid, turn_no=n, model=model) for n in (0, 1)]
    # Then each committed turn has its row, the model call in model_ms as in usage
    assert [o.value for o in outcomes] == ["committed", "committed"]
    rows = _ledger(runtime, sid)
    assert [r.turn_no for r in rows] == [0, 1]
    with runtime.engine.connect() as conn:
        latency = {
            r.turn_no: r.latency_ms
            for r in conn.execute(
                select(usage.c.turn_no, usage.c.latency_ms).where(usage.c.session_id == sid)
            )
        }
    for row in rows:
        assert row.run_id == run_id
        assert row.model_ms >= 49 and int(row.model_ms) == latency[row.turn_no]
        assert row.queue_ms is not None and row.queue_ms >= 0
        for phase in ("claim_ms", "rebuild_ms", "tools_ms", "commit_ms"):
            assert 0 <= getattr(row, phase) < row.model_ms + 5_000
        assert row.cpu_ms > 0
    # and the wave start sent turn 0 elsewhere, while this process sent turn 1 itself
    assert rows[0].dispatch_ms is None
    assert rows[1].dispatch_ms is not None and rows[1].dispatch_ms >= 0
    assert _duplicates(runtime, run_id) == 0


def test_a_duplicate_turn_task_is_counted_and_writes_no_row(runtime: Runtime) -> None:
    # Given a committed turn 0
    run_id, (sid,) = make_run(runtime.engine)
    turn = model_turn(call("plan_manage", action="set", items=["a"]))
    assert run_turn(rt=runtime, session_id=sid, turn_no=0, model=ScriptedModel([turn])).value == (
        "committed"
    )
    # When its task is delivered twice more, and a task for a turn not yet due once
    for n in (0, 0, 5):
        assert run_turn(
            rt=runtime, session_id=sid, turn_no=n, model=ScriptedModel([turn])
        ).value == ("skipped")
    # Then the run counts three duplicate turn tasks, and the ledger holds one row
    assert _duplicates(runtime, run_id) == 3
    assert [r.turn_no for r in _ledger(runtime, sid)] == [0]


def test_a_turn_handed_back_for_a_retry_writes_no_row(runtime: Runtime) -> None:
    # Given a model that is unavailable for now
    run_id, (sid,) = make_run(runtime.engine)

    def unavailable(_: ModelRequest) -> None:
        raise ModelUnavailable("overloaded", delay_s=0.01)

    model = ScriptedModel([model_turn(call("plan_manage", action="list"))], before=unavailable)
    # When the turn runs and is handed back
    with pytest.raises(Exception, match="overloaded"):
        run_turn(rt=runtime, session_id=sid, turn_no=0, model=model)
    # Then nothing committed, so nothing is in the ledger, and it is no duplicate
    assert _ledger(runtime, sid) == []
    assert _duplicates(runtime, run_id) == 0
