"""The turn loop against real PostgreSQL: idempotency, fencing, tool errors, endings."""

from __future__ import annotations

import gc
import threading
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import func, select, update

from tests.factories import ScriptedModel, call, make_run, model_turn, page, run_script
from worker.agent.frozen import FrozenDict
from worker.agent.turn import RUN_CONFIGS, RunConfigs, run_turn
from worker.config import RunConfig
from worker.errors import (
    ModelFatal,
    ModelPaused,
    ModelUnavailable,
    RateLimited,
    Throttled,
    TransientError,
)
from worker.fleet.runtime import Runtime
from worker.models.base import ModelRequest
from worker.store.sessions import SessionView
from worker.store.tables import artifact_versions, blobs, events, runs, sessions, usage

pytestmark = pytest.mark.services


def _events(rt: Runtime, session_id: int) -> list[tuple[int, int, str, dict[str, Any]]]:
    with rt.engine.connect() as conn:
        rows = conn.execute(
            select(events.c.turn_no, events.c.seq, events.c.kind, events.c.payload)
            .where(events.c.session_id == session_id)
            .order_by(events.c.turn_no, events.c.seq)
        ).all()
    return [(r.turn_no, r.seq, r.kind, r.payload) for r in rows]


def _count(rt: Runtime, table: Any, *where: Any) -> int:
    with rt.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table).where(*where)).scalar_one())


def test_duplicate_turn_task_changes_nothing(runtime: Runtime) -> None:
    # Given a session whose turn 0 creates an artifact
    _, (sid,) = make_run(runtime.engine)
    turn = model_turn(
        call("manage_artifact", action="create", name="dashboard.html", content=page())
    )
    # When the same turn task is delivered twice, the second after the first committed
    first = run_turn(rt=runtime, session_id=sid, turn_no=0, model=ScriptedModel([turn]))
    second = run_turn(rt=runtime, session_id=sid, turn_no=0, model=ScriptedModel([turn]))
    # Then only the first ran: one model event, one usage row, one artifact version
    assert (first.value, second.value) == ("committed", "skipped")
    kinds = [kind for _, _, kind, _ in _events(runtime, sid)]
    assert kinds == ["brief", "model", "tool_result"]
    assert _count(runtime, usage, usage.c.session_id == sid) == 1
    assert _count(runtime, artifact_versions) == 1


def test_concurrent_duplicate_runs_the_turn_once(runtime: Runtime) -> None:
    # Given two deliveries of the same turn racing each other
    _, (sid,) = make_run(runtime.engine)
    turn = model_turn(call("plan_manage", action="set", items=["a", "b"]))
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def deliver() -> None:
        barrier.wait()
        outcomes.append(
            run_turn(rt=runtime, session_id=sid, turn_no=0, model=ScriptedModel([turn])).value
        )

    threads = [threading.Thread(target=deliver) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    # Then exactly one claimed and committed it
    assert sorted(outcomes) == ["committed", "skipped"]
    assert _count(runtime, usage, usage.c.session_id == sid) == 1
    assert _count(runtime, events, events.c.session_id == sid, events.c.kind == "model") == 1


def test_commit_from_a_fenced_worker_changes_nothing(runtime: Runtime) -> None:
    # Given worker A claimed turn 0 and is slow in its model call
    _, (sid,) = make_run(runtime.engine)
    b_turn = model_turn(call("plan_manage", action="set", items=["from B"]))
    a_turn = model_turn(
        call("manage_artifact", action="create", name="dashboard.html", content=page("from A"))
    )
    rt_b = Runtime(
        settings=runtime.settings,
        engine=runtime.engine,
        dispatcher=runtime.dispatcher,
        owner="worker-b",
    )
    b_outcomes: list[str] = []

    def take_over(_: ModelRequest) -> None:
        # ...meanwhile its lease expires and worker B runs and commits the same turn
        with runtime.engine.begin() as conn:
            conn.execute(
                update(sessions)
                .where(sessions.c.id == sid)
                .values(lease_expires_at=runtime.clock().replace(year=2000))
            )
        b_outcomes.append(
            run_turn(rt=rt_b, session_id=sid, turn_no=0, model=ScriptedModel([b_turn])).value
        )

    # When A's model call returns and A tries to commit
    a = run_turn(
        rt=runtime, session_id=sid, turn_no=0, model=ScriptedModel([a_turn], before=take_over)
    )
    # Then B's commit stands and A changed nothing
    assert b_outcomes == ["committed"]
    assert a.value == "fenced"
    model_events = [p for _, _, kind, p in _events(runtime, sid) if kind == "model"]
    assert len(model_events) == 1
    assert model_events[0]["content"]["parts"][0]["function_call"]["args"]["items"] == ["from B"]
    assert _count(runtime, artifact_versions) == 0
    assert _count(runtime, usage, usage.c.session_id == sid) == 1
    with runtime.engine.connect() as conn:
        row = conn.execute(
            select(sessions.c.next_turn, sessions.c.lease_epoch).where(sessions.c.id == sid)
        ).one()
    assert (row.next_turn, row.lease_epoch) == (1, 2)


def test_a_plan_set_again_replaces_the_old_one_longer_or_shorter(runtime: Runtime) -> None:
    # Given a session that sets a plan of three items and checks the second off
    _, (sid,) = make_run(runtime.engine)
    turns = [
        model_turn(
            call("plan_manage", action="set", items=["a", "b", "c"]),
            call("plan_manage", action="done", item_id=2),
        ),
        # When it sets a plan of two, then of four, and lists it in the next turn
        model_turn(
            call("plan_manage", action="set", items=["x", "y"]),
            call("plan_manage", action="set", items=["p", "q", "r", "s"]),
            call("plan_manage", action="done", item_id=4),
        ),
        model_turn(call("plan_manage", action="list")),
    ]
    assert run_script(runtime, sid, turns) == ["committed"] * 3
    # Then every call saw the plan as the one before left it, and the last one stored
    results = [
        p["response"]["output"]["items"]
        for _, _, kind, p in _events(runtime, sid)
        if kind == "tool_result"
    ]
    items = [[(i["id"], i["text"], i["done"]) for i in r] for r in results]
    assert items == [
        [(1, "a", False), (2, "b", False), (3, "c", False)],
        [(1, "a", False), (2, "b", True), (3, "c", False)],
        [(1, "x", False), (2, "y", False)],
        [(1, "p", False), (2, "q", False), (3, "r", False), (4, "s", False)],
        [(1, "p", False), (2, "q", False), (3, "r", False), (4, "s", True)],
        [(1, "p", False), (2, "q", False), (3, "r", False), (4, "s", True)],
    ]


def test_stale_expected_version_returns_conflict_with_current_version(runtime: Runtime) -> None:
    # Given an artifact at version 2
    _, (sid,) = make_run(runtime.engine)
    outcomes = run_script(
        runtime,
        sid,
        [
            model_turn(
                call("manage_artifact", action="create", name="dashboard.html", content=page("v1"))
            ),
            model_turn(
                call(
                    "manage_artifact",
                    action="edit",
                    name="dashboard.html",
                    content=page("v2"),
                    expected_version=1,
                )
            ),
            # When the model edits with a version it no longer holds
            model_turn(
                call(
                    "manage_artifact",
                    action="edit",
                    name="dashboard.html",
                    region_id="gauges",
                    content="<h2>v3</h2>",
                    expected_version=1,
                )
            ),
        ],
    )
    assert outcomes == ["committed"] * 3
    # Then the tool answers with a conflict carrying the current version, and writes nothing
    last = [(kind, p) for turn_no, _, kind, p in _events(runtime, sid) if turn_no == 2]
    assert last[-1][0] == "tool_error"
    error = last[-1][1]["response"]["error"]
    assert error["kind"] == "conflict"
    assert error["current_version"] == 2
    assert "expected_version" in error["hint"]
    assert _count(runtime, artifact_versions) == 2


def test_region_edit_replaces_only_that_region(runtime: Runtime) -> None:
    # Given a page with a gauges region
    _, (sid,) = make_run(runtime.engine)
    run_script(
        runtime,
        sid,
        [
            model_turn(
                call("manage_artifact", action="create", name="dashboard.html", content=page("old"))
            ),
            # When the model edits that region in place
            model_turn(
                call(
                    "manage_artifact",
                    action="edit",
                    name="dashboard.html",
                    region_id="gauges",
                    content="<h2>new</h2>",
                    expected_version=1,
                )
            ),
            model_turn(call("manage_artifact", action="get", name="dashboard.html")),
        ],
    )
    # Then version 2 differs from version 1 only inside the region, and each version
    # records the turn that wrote it
    with runtime.engine.connect() as conn:
        rows = conn.execute(
            select(
                artifact_versions.c.version,
                artifact_versions.c.turn_no,
                blobs.c.content,
            )
            .join(blobs, blobs.c.sha256 == artifact_versions.c.sha256)
            .order_by(artifact_versions.c.version)
        ).all()
    assert [(r.version, r.turn_no) for r in rows] == [(1, 0), (2, 1)]
    assert rows[1].content == page("old").replace("<h2>old</h2>", "<h2>new</h2>")


@pytest.mark.parametrize(
    ("calls", "kind"),
    [
        ([call("manage_artifact", action="create", name="dashboard.html")], "bad_arguments"),
        ([call("manage_artifact", action="explode", name="x.html")], "bad_arguments"),
        (
            [call("manage_artifact", action="create", name="../../etc/passwd", content="x")],
            "bad_arguments",
        ),
        (
            [
                call(
                    "manage_artifact",
                    action="edit",
                    name="dashboard.html",
                    content="x",
                    expected_version="latest",
                )
            ],
            "bad_arguments",
        ),
        (
            [
                call(
                    "manage_artifact",
                    action="create",
                    name="big.html",
                    content="<p>" + "x" * 70_000 + "</p>",
                )
            ],
            "too_large",
        ),
        ([call("write_file", path="a.html")], "unknown_tool"),
        ([call("manage_artifact", action="get", name="nothing.html")], "not_found"),
        ([call("handoff", summary="done", artifact_name="nothing.html")], "not_found"),
        ([call("plan_manage", action="done", item_id=3)], "not_found"),
        ([call("plan_manage", action="set", items=[])], "bad_arguments"),
        (
            [
                call("manage_artifact", action="create", name="a.html", content="<p>no canvas</p>"),
                call("handoff", summary="s", artifact_name="a.html"),
            ],
            "checks_failed",
        ),
    ],
)
def test_bad_calls_come_back_as_tool_errors(runtime: Runtime, calls: list[Any], kind: str) -> None:
    # Given a session, when the model sends a bad call
    _, (sid,) = make_run(runtime.engine)
    outcome = run_turn(
        rt=runtime, session_id=sid, turn_no=0, model=ScriptedModel([model_turn(*calls)])
    )
    # Then the turn commits, the error is recorded with its kind and a hint, the session runs on
    assert outcome.value == "committed"
    errors = [p for _, _, k, p in _events(runtime, sid) if k == "tool_error"]
    assert [e["kind"] for e in errors] == [kind]
    assert errors[0]["response"]["error"]["message"]
    with runtime.engine.connect() as conn:
        assert (
            conn.execute(select(sessions.c.status).where(sessions.c.id == sid)).scalar_one()
            == "running"
        )


def test_text_answer_gets_a_notice_and_counts(runtime: Runtime) -> None:
    # Given a model that answers in a markdown block instead of calling a tool
    _, (sid,) = make_run(runtime.engine)
    run_turn(
        rt=runtime,
        session_id=sid,
        turn_no=0,
        model=ScriptedModel([model_turn(text="```html\n<p>hi</p>\n```")]),
    )
    # Then a notice tells it to publish through the tool, and the next turn sees it
    kinds = [(k, p.get("reason")) for _, _, k, p in _events(runtime, sid)]
    assert kinds[-1] == ("nudge", "no_tool_call")
    follow = ScriptedModel([model_turn(call("plan_manage", action="list"))])
    run_turn(rt=runtime, session_id=sid, turn_no=1, model=follow)
    last_user = follow.requests[0].history[-1]
    assert last_user["role"] == "user"
    assert "manage_artifact" in last_user["parts"][0]["text"]


def test_handoff_moves_session_to_verifying_and_dispatches_verify(runtime: Runtime) -> None:
    _, (sid,) = make_run(runtime.engine)
    run_script(
        runtime,
        sid,
        [
            model_turn(
                call("manage_artifact", action="create", name="dashboard.html", content=page()),
                call("handoff", summary="done", artifact_name="dashboard.html"),
                call("plan_manage", action="list"),
            )
        ],
    )
    with runtime.engine.connect() as conn:
        row = conn.execute(
            select(sessions.c.status, sessions.c.handoff_version_id).where(sessions.c.id == sid)
        ).one()
    assert row.status == "verifying" and row.handoff_version_id is not None
    sent = runtime.dispatcher.sent  # type: ignore[attr-defined]
    assert (sent[-1].kind, sent[-1].session_id, sent[-1].number) == ("verify", sid, 0)
    # A call after handoff in the same turn is refused, not run
    assert [p["kind"] for _, _, k, p in _events(runtime, sid) if k == "tool_error"] == [
        "after_handoff"
    ]


def test_max_turns_stops_the_session(runtime: Runtime) -> None:
    _, (sid,) = make_run(runtime.engine, max_turns=2)
    outcomes = run_script(runtime, sid, [model_turn(call("plan_manage", action="list"))] * 3)
    assert outcomes == ["committed", "committed", "ended"]
    with runtime.engine.connect() as conn:
        row = conn.execute(
            select(sessions.c.status, sessions.c.outcome).where(sessions.c.id == sid)
        ).one()
    assert (row.status, row.outcome) == ("stopped", "max_turns")


def test_turns_of_one_run_validate_its_settings_once(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a run of three sessions, and every validation of a run's settings counted
    run_id, sids = make_run(runtime.engine, waves="1x3")
    validated: list[object] = []
    validate = RunConfig.model_validate

    def counted(value: Any) -> RunConfig:
        validated.append(value)
        return validate(value)

    monkeypatch.setattr(RunConfig, "model_validate", counted)
    model = ScriptedModel([model_turn(call("plan_manage", action="list"))] * 3)
    # When a turn of each runs
    for sid in sids:
        assert run_turn(rt=runtime, session_id=sid, turn_no=0, model=model).value == "committed"
    # Then the settings were validated by the first turn only, and what the turns share is
    # read-only
    assert len(validated) == 1
    shared, _ = RUN_CONFIGS.get(run_id, _stored_config(runtime, run_id))
    assert len(validated) == 1
    with pytest.raises(TypeError, match="read-only"):
        shared["max_turns"] = 1


def test_a_turn_waiting_on_its_model_holds_one_view_of_its_session(runtime: Runtime) -> None:
    # Given a session two turns in, and a model that looks, during its call, at every view
    # of that session alive in the process
    _, (sid,) = make_run(runtime.engine)
    seen: list[list[tuple[int, bool]]] = []

    def alive(_: ModelRequest) -> None:
        gc.collect()
        seen.append(
            [
                (len(o.events), type(o.run_config) is FrozenDict)
                for o in gc.get_objects()
                if isinstance(o, SessionView) and o.id == sid
            ]
        )

    model = ScriptedModel([model_turn(call("plan_manage", action="list"))] * 3, before=alive)
    # When its turns run
    for n in range(3):
        assert run_turn(rt=runtime, session_id=sid, turn_no=n, model=model).value == "committed"
    # Then while each waited on its model it held one view, without the rows its claim read
    # (they are in the kept history), with its run's shared settings
    assert seen == [[(0, True)]] * 3


def test_settings_rewritten_under_a_run_are_what_its_next_turn_applies(
    runtime: Runtime,
) -> None:
    # Given a session with one turn behind it, its run's settings kept by this process
    run_id, (sid,) = make_run(runtime.engine, max_turns=5)
    model = ScriptedModel([model_turn(call("plan_manage", action="list"))] * 2)
    assert run_turn(rt=runtime, session_id=sid, turn_no=0, model=model).value == "committed"
    # When the run's stored settings change, then the next turn runs
    with runtime.engine.begin() as conn:
        conn.execute(
            update(runs)
            .where(runs.c.id == run_id)
            .values(config={**_stored_config(runtime, run_id), "max_turns": 1})
        )
    outcome = run_turn(rt=runtime, session_id=sid, turn_no=1, model=model)
    # Then that turn applies the settings as stored, not those the process kept
    assert outcome.value == "ended"
    with runtime.engine.connect() as conn:
        row = conn.execute(select(sessions.c.outcome).where(sessions.c.id == sid)).one()
    assert row.outcome == "max_turns"


def test_the_kept_settings_are_bounded_by_runs_least_recently_used_first() -> None:
    # Given room for the settings of two runs
    kept = RunConfigs(max_runs=2)
    settings = {n: RunConfig(waves="1x1", seed=n).model_dump(mode="json") for n in (1, 2, 3)}
    first = kept.get(1, settings[1])
    kept.get(2, settings[2])
    # When run 1 is read again and run 3 comes
    assert kept.get(1, dict(settings[1])) is first
    kept.get(3, settings[3])
    # Then run 2's were dropped and run 1's kept: run 2 is validated again, run 1 is not
    assert kept.get(1, settings[1]) is first
    assert kept.get(2, settings[2])[1] == RunConfig(waves="1x1", seed=2)
    assert len(kept) == 2


def _stored_config(rt: Runtime, run_id: int) -> dict[str, Any]:
    with rt.engine.connect() as conn:
        stored: dict[str, Any] = conn.execute(
            select(runs.c.config).where(runs.c.id == run_id)
        ).scalar_one()
    return stored


def test_a_turn_that_keeps_crashing_ends_the_session_in_error(runtime: Runtime) -> None:
    # Given a turn whose model call crashes the worker every time
    _, (sid,) = make_run(runtime.engine)

    def crash(_: ModelRequest) -> None:
        raise RuntimeError("segfault stand-in")

    for _ in range(runtime.settings.max_turn_attempts):
        with pytest.raises(RuntimeError):
            run_turn(
                rt=runtime,
                session_id=sid,
                turn_no=0,
                model=ScriptedModel([model_turn()], before=crash),
            )
        with runtime.engine.begin() as conn:  # the dead worker's lease runs out
            conn.execute(
                update(sessions)
                .where(sessions.c.id == sid)
                .values(lease_expires_at=runtime.clock().replace(year=2000))
            )
    # When it is claimed once more
    outcome = run_turn(
        rt=runtime, session_id=sid, turn_no=0, model=ScriptedModel([model_turn()], before=crash)
    )
    # Then the session ends in error with the reason, and its wave counts it
    assert outcome.value == "ended"
    with runtime.engine.connect() as conn:
        row = conn.execute(
            select(sessions.c.status, sessions.c.outcome, sessions.c.error).where(
                sessions.c.id == sid
            )
        ).one()
    assert (row.status, row.outcome) == ("error", "poison_turn")
    assert "without committing" in row.error


def _raising(exc: Exception) -> ScriptedModel:
    def fail(_: ModelRequest) -> None:
        raise exc

    return ScriptedModel([model_turn()], before=fail)


def _session(rt: Runtime, sid: int) -> Any:
    with rt.engine.connect() as conn:
        return conn.execute(select(sessions).where(sessions.c.id == sid)).one()


def test_a_transient_error_hands_the_turn_back_for_a_counted_retry(runtime: Runtime) -> None:
    # Given a model that is unavailable, with the server asking for 3 s
    _, (sid,) = make_run(runtime.engine)
    # When the turn runs
    with pytest.raises(TransientError) as raised:
        run_turn(
            rt=runtime, session_id=sid, turn_no=0, model=_raising(RateLimited("429", delay_s=3.0))
        )
    # Then it asks for a retry after the server's delay, which uses up a retry,
    # and the lease is free again with nothing committed
    assert (raised.value.delay_s, raised.value.counts) == (3.0, True)
    row = _session(runtime, sid)
    assert (row.status, row.next_turn, row.lease_owner, row.turn_attempts) == (
        "running",
        0,
        None,
        0,
    )
    assert row.model_retries == 1


def test_a_throttled_turn_does_not_use_up_retries(runtime: Runtime) -> None:
    # Given a turn that has used all its retries, and a fleet limiter with no slot free
    _, (sid,) = make_run(runtime.engine)
    retries = runtime.settings.max_model_retries
    # When it is throttled
    with pytest.raises(TransientError) as raised:
        run_turn(
            rt=runtime,
            session_id=sid,
            turn_no=0,
            retries=retries,
            model=_raising(Throttled("busy", delay_s=1.0, reason="concurrency")),
        )
    # Then it is handed back without counting, and the session goes on
    assert raised.value.counts is False
    assert (_session(runtime, sid).status, _session(runtime, sid).model_retries) == ("running", 0)
    # while a real failure at that count ends the session in error
    outcome = run_turn(
        rt=runtime,
        session_id=sid,
        turn_no=0,
        retries=retries,
        model=_raising(ModelUnavailable("503 UNAVAILABLE")),
    )
    row = _session(runtime, sid)
    assert (outcome.value, row.status, row.outcome) == ("ended", "error", "retries_exhausted")
    assert "503 UNAVAILABLE" in row.error


def test_a_spent_daily_quota_stops_the_session(runtime: Runtime) -> None:
    # Given a provider that found the model's daily quota spent (and paused it fleet-wide)
    exc = ModelPaused(
        model="gemini-3-flash-preview", until=datetime(2030, 1, 1, tzinfo=UTC), reason="per day"
    )
    _, (sid,) = make_run(runtime.engine)
    outcome = run_turn(rt=runtime, session_id=sid, turn_no=0, model=_raising(exc))
    row = _session(runtime, sid)
    assert (outcome.value, row.status, row.outcome) == ("ended", "stopped", "quota")
    assert "per day" in row.error


def test_a_fatal_model_error_ends_the_session_with_its_message(runtime: Runtime) -> None:
    _, (sid,) = make_run(runtime.engine)
    outcome = run_turn(
        rt=runtime,
        session_id=sid,
        turn_no=0,
        model=_raising(ModelFatal("400 INVALID_ARGUMENT: bad schema")),
    )
    row = _session(runtime, sid)
    assert (outcome.value, row.status, row.outcome) == ("ended", "error", "model_error")
    assert row.error == "400 INVALID_ARGUMENT: bad schema"
