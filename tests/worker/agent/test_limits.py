"""Guards: spend limits, the run budget and the loop detector, on real PostgreSQL."""

from __future__ import annotations

from typing import Any, cast

import pytest
from sqlalchemy import select

from tests.factories import ScriptedModel, call, dashboard_sim, make_run, model_turn, page
from worker.agent.events import Event, ModelOutput, Nudge, NudgeReason, ToolFailure, ToolResult
from worker.agent.limits import find_loop
from worker.agent.turn import run_turn
from worker.config import RunConfig
from worker.fleet.runtime import Runtime
from worker.models.base import ModelTurn
from worker.store.tables import events, runs, sessions
from worker.tasks.dashboard.sim import DashboardPlayer

pytestmark = pytest.mark.services

CONFIG = RunConfig(waves="1")


def _model(*calls: Any) -> Event:
    parts = [{"function_call": {"name": c.name, "args": c.args}} for c in calls]
    return ModelOutput({"role": "model", "parts": parts})


def _ok(name: str, *, progress: bool = False, **output: Any) -> Event:
    return ToolResult(name, None, output, progress=progress)


def _error(kind: str) -> Event:
    return ToolFailure("manage_artifact", None, kind, {"kind": kind})


def test_a_normal_session_is_no_loop() -> None:
    log = [
        _model(call("plan_manage", action="set", items=["a"])),
        _ok("plan_manage", items=[]),
        _model(call("manage_artifact", action="create", name="d", content="x")),
        _error("bad_arguments"),
        _model(call("manage_artifact", action="create", name="d", content="y")),
        _ok("manage_artifact", progress=True, version=1, size_bytes=1),
        _model(call("handoff", summary="s", artifact_name="d")),
        _ok("handoff", progress=True),
    ]
    assert find_loop(log, CONFIG) == (None, 0)


def test_the_same_call_three_times_is_a_loop_until_warned() -> None:
    probe = _model(call("plan_manage", action="list"))
    log = [probe, _ok("plan_manage", items=[])] * 3
    loop, warnings = find_loop(log, CONFIG)
    assert loop is not None and loop.kind == "repeat" and warnings == 0
    assert "plan_manage" in loop.message and "3 times" in loop.message
    # After the warning the count starts again
    warned = [*log, Nudge(NudgeReason.loop, {"role": "user", "parts": [{"text": "loop"}]})]
    assert find_loop(warned, CONFIG) == (None, 1)
    assert find_loop(warned + log, CONFIG)[1] == 1
    assert find_loop(warned + log, CONFIG)[0] is not None


def test_consecutive_tool_errors_are_a_loop() -> None:
    log: list[Event] = []
    for i in range(4):
        log += [_model(call("manage_artifact", action="get", name=f"x{i}")), _error("not_found")]
    loop, _ = find_loop(log, CONFIG)
    assert loop is not None and loop.kind == "errors" and "not_found" in loop.message
    assert find_loop([*log[:-1], _ok("manage_artifact")], CONFIG)[0] is None


def test_turns_without_writing_the_artifact_are_a_loop() -> None:
    log: list[Event] = []
    for i in range(6):
        log += [
            _model(call("manage_artifact", action="get", name=f"n{i % 2}")),
            _ok("manage_artifact", content=""),
        ]
    loop, _ = find_loop(log, CONFIG)
    assert loop is not None and loop.kind == "no_progress"
    assert find_loop(log[:-2], CONFIG)[0] is None


def _turns(rt: Runtime, sid: int, model: Any, limit: int = 40) -> list[str]:
    outcomes = []
    for n in range(limit):
        outcome = run_turn(rt=rt, session_id=sid, turn_no=n, model=model).value
        outcomes.append(outcome)
        if outcome != "committed":
            break
        with rt.engine.connect() as conn:
            status = conn.execute(select(sessions.c.status).where(sessions.c.id == sid)).scalar()
        if status != "running":
            break
    return outcomes


def _session(rt: Runtime, sid: int) -> Any:
    with rt.engine.connect() as conn:
        return conn.execute(select(sessions).where(sessions.c.id == sid)).one()


def test_a_looping_session_is_warned_once_then_stopped(runtime: Runtime) -> None:
    # Given an agent that asks for the plan over and over
    _, (sid,) = make_run(runtime.engine)
    model = ScriptedModel([model_turn(call("plan_manage", action="list"))] * 10)
    # When its turns run
    outcomes = _turns(runtime, sid, model)
    # Then it was told once, on the third turn, and stopped on the sixth
    with runtime.engine.connect() as conn:
        nudges = conn.execute(
            select(events.c.turn_no, events.c.payload).where(
                events.c.session_id == sid, events.c.kind == "nudge"
            )
        ).all()
    assert [(t, p["kind"]) for t, p in nudges] == [(2, "repeat")]
    assert "plan_manage" in nudges[0].payload["content"]["parts"][0]["text"]
    assert outcomes == ["committed"] * 5 + ["ended"]
    row = _session(runtime, sid)
    assert (row.status, row.outcome) == ("stopped", "loop")
    # and the warning was in the conversation the model saw on the next turn
    seen = model.requests[3].history[-1]["parts"]
    assert any("Do not repeat it" in p.get("text", "") for p in seen)


def test_the_explorer_persona_is_caught_within_a_few_turns(runtime: Runtime) -> None:
    for seed in range(6):
        # Given an explorer, whichever way its dice fall
        _, (sid,) = make_run(runtime.engine, seed=seed)
        model = dashboard_sim(seed=seed, persona="explorer", title="Probe")
        # When its turns run
        _turns(runtime, sid, model)
        row = _session(runtime, sid)
        # Then it was warned by its 7th turn, and either went to work or was stopped
        with runtime.engine.connect() as conn:
            warned_at = (
                conn.execute(
                    select(events.c.turn_no).where(
                        events.c.session_id == sid, events.c.kind == "nudge"
                    )
                )
                .scalars()
                .all()
            )
        assert warned_at and warned_at[0] <= 6, (seed, warned_at)
        assert row.status in ("verifying", "stopped"), (seed, row.status)
        if row.status == "stopped":
            assert row.outcome == "loop" and row.next_turn <= 13
        else:
            assert not cast(DashboardPlayer, model.player).heeds_warnings or row.next_turn <= 12


def _costly(n: int) -> list[ModelTurn]:
    return [
        model_turn(
            call("manage_artifact", action="create", name=f"p{i}.html", content=page(str(i)))
        )
        for i in range(n)
    ]


def test_a_checked_run_budget_stops_new_turns_and_is_recorded(runtime: Runtime) -> None:
    # Given a run that checks its budget as turns start (no reservations), whose budget
    # covers two and a half turns
    turn_cost = runtime.prices.cost_usd("sim", _costly(1)[0].usage)
    run_id, (sid,) = make_run(runtime.engine, budget_usd=turn_cost * 2.5, reserve="off")
    # When the session keeps working
    outcomes = _turns(runtime, sid, ScriptedModel(_costly(10)))
    # Then no turn started once the next one would pass the budget
    assert outcomes == ["committed", "committed", "ended"]
    row = _session(runtime, sid)
    assert (row.status, row.outcome) == ("stopped", "budget")
    with runtime.engine.connect() as conn:
        reason = conn.execute(select(runs.c.stop_reason).where(runs.c.id == run_id)).scalar()
    assert reason is not None and reason.startswith("budget: spent $")


@pytest.mark.parametrize(
    ("limit", "outcome"),
    [({"max_tokens": 3000}, "max_tokens"), ({"max_cost_usd": 0.001}, "max_cost")],
)
def test_session_spend_limits(runtime: Runtime, limit: dict[str, Any], outcome: str) -> None:
    # model_turn bills 1070 tokens and $0.00035 a turn
    _, (sid,) = make_run(runtime.engine, **limit)
    outcomes = _turns(runtime, sid, ScriptedModel(_costly(10)))
    assert outcomes == ["committed"] * 3 + ["ended"]
    row = _session(runtime, sid)
    assert (row.status, row.outcome) == ("stopped", outcome)
