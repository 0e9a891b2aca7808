"""Replay: a session re-enacted from its event log gives back every artifact version, byte
for byte; a log or a version changed after the fact does not."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import Engine, select, update

from tests.factories import call, make_run, model_turn, page, run_script
from tests.worker.runs.conftest import scheduler
from worker.agent.events import decode
from worker.agent.history import rebuild
from worker.agent.workspace import get_artifact, get_plan
from worker.errors import InputError
from worker.fleet.runtime import Runtime
from worker.reads.recorded import session_log
from worker.runs.fork import create_fork
from worker.runs.replay import replay_session
from worker.settings import Settings
from worker.store.blobs import add_blobs, blob_of, contents, restore_all
from worker.store.engine import utcnow
from worker.store.sessions import load_session
from worker.store.tables import artifact_versions, events

pytestmark = [pytest.mark.services, pytest.mark.slow]

GEMINI = "gemini-3-flash-preview"


def test_a_ten_turn_session_replays_byte_for_byte(
    settings: Settings, engine: Engine, long_session: Callable[..., int]
) -> None:
    # Given a finished session of ten turns or more
    session_id = long_session()
    with engine.connect() as conn:
        recorded = conn.execute(
            select(artifact_versions.c.version, artifact_versions.c.sha256).order_by(
                artifact_versions.c.version
            )
        ).all()
    # When it is replayed
    result = scheduler(settings, "replay", str(session_id))
    # Then every recorded version came out byte for byte, and the command says so
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    # (a version's row ends with its hash and the verdict; a verdict's row, judged again,
    # with what was recorded, what came out now and how)
    matched = [line for line in lines if re.search(r"\b[0-9a-f]{12}\s+match$", line)]
    assert len(matched) == len(recorded) >= 2
    assert [line for line in lines if re.search(r"\bpass\s+pass\s+\w+\s+match$", line)]
    for (version, sha), line in zip(recorded, matched, strict=True):
        assert f"dashboard.html v{version} " in line and sha[:12] in line
    assert lines[-1].startswith(f"session {session_id} replays byte for byte")
    # and the JSON form carries each version's recorded and replayed hash
    out = json.loads(scheduler(settings, "replay", str(session_id), "--json").stdout)
    assert out["ok"] is True and out["turns"] >= 10 and out["divergences"] == []
    assert [(v["version"], v["replayed_sha256"]) for v in out["versions"]] == [
        (version, sha) for version, sha in recorded
    ]


def test_a_tampered_version_or_event_fails_replay(
    settings: Settings, engine: Engine, long_session: Callable[..., int]
) -> None:
    # Given a long session that replays
    session_id = long_session()
    with engine.connect() as conn:
        assert replay_session(conn, session_id=session_id, now=utcnow()).ok
    # When one byte of its second version is changed in the database (the version row now
    # names a page stored under its own hash)
    with engine.begin() as conn:
        v2 = conn.execute(
            select(
                artifact_versions.c.id, artifact_versions.c.sha256, artifact_versions.c.turn_no
            ).where(artifact_versions.c.version == 2)
        ).one()
        (page,) = contents(conn, {v2.sha256}).values()
        tampered = blob_of(page.replace("<", "[", 1))
        add_blobs(conn, [tampered])
        conn.execute(
            update(artifact_versions)
            .where(artifact_versions.c.id == v2.id)
            .values(sha256=tampered.sha256)
        )
    result = scheduler(settings, "replay", str(session_id))
    # Then the replay fails on that version, in one error line, with a non-zero exit
    assert result.exit_code == 1
    assert "v2" in next(line for line in result.stdout.splitlines() if "MISMATCH" in line)
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: session {session_id} does not replay: dashboard.html v2")
    # and a fork after that version is refused: its workspace would not be the recorded one
    result = scheduler(settings, "fork", str(session_id), "--at-turn", str(v2.turn_no + 1))
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert "does not re-enact as recorded (dashboard.html v2" in line
    # Given the version put back, when a recorded model call is changed instead
    with engine.begin() as conn:
        conn.execute(
            update(artifact_versions)
            .where(artifact_versions.c.id == v2.id)
            .values(sha256=v2.sha256)
        )
        assert replay_session(conn, session_id=session_id, now=utcnow()).ok
        _tamper_create(conn, session_id)
        report = replay_session(conn, session_id=session_id, now=utcnow())
    # Then the version it wrote no longer matches either
    assert not report.ok
    assert [v.version for v in report.versions if not v.match][:1] == [1]
    assert "dashboard.html v1" in (report.problem or "")
    result = scheduler(settings, "replay", str(session_id), "--json")
    assert result.exit_code == 1 and json.loads(result.stdout)["ok"] is False


def _tamper_create(conn: Any, session_id: int) -> None:
    """Change the page of the recorded ``create`` call, as a rewritten log would."""
    rows = conn.execute(
        select(events.c.id, events.c.payload, events.c.blobs).where(
            events.c.session_id == session_id, events.c.kind == "model"
        )
    ).all()
    for row in rows:
        # The payload whole again, its page kept in place (a log may hold either).
        (payload,) = restore_all(conn, [(row.payload, row.blobs)])
        payload = copy.deepcopy(payload)
        for part in payload["content"]["parts"]:
            call = part.get("function_call") or {}
            if call.get("args", {}).get("action") == "create":
                call["args"]["content"] = call["args"]["content"].replace("<", "[", 1)
                conn.execute(
                    update(events).where(events.c.id == row.id).values(payload=payload, blobs=None)
                )
                return
    raise AssertionError("no create call in the log")


def test_replay_of_a_missing_session_is_one_line(settings: Settings) -> None:
    result = scheduler(settings, "replay", "987654")
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: no session 987654"


def test_refusals_conflicts_and_elided_arguments_replay_as_recorded(
    runtime: Runtime, engine: Engine
) -> None:
    # Given a baseline session (8 KB ceiling) whose turns include a page so far over the
    # ceiling that its argument was not stored, a stale edit, and a delete then re-create
    _, (session_id,) = make_run(engine, profile="baseline")
    huge = "<!-- " + "x" * 40_000 + " -->"
    outcomes = run_script(
        runtime,
        session_id,
        [
            model_turn(call("manage_artifact", action="create", name="a.html", content=huge)),
            model_turn(call("manage_artifact", action="create", name="a.html", content=page())),
            model_turn(
                call(
                    "manage_artifact",
                    action="edit",
                    name="a.html",
                    region_id="gauges",
                    content="<h2>v2</h2>",
                    expected_version=1,
                ),
                call("plan_manage", action="set", items=["draw", "hand off"]),
            ),
            model_turn(
                call(
                    "manage_artifact", action="edit", name="a.html", content="x", expected_version=1
                )
            ),
            model_turn(
                call("manage_artifact", action="delete", name="a.html", expected_version=2),
                call("manage_artifact", action="create", name="a.html", content=page("v3")),
                call("plan_manage", action="done", item_id=1),
            ),
        ],
    )
    assert outcomes == ["committed"] * 5
    # When it is replayed
    with engine.connect() as conn:
        report = replay_session(conn, session_id=session_id, now=utcnow())
    # Then all three versions and every result came back; the elided call kept its refusal
    assert report.ok, report.problem
    assert (report.turns, report.calls, report.elided) == (5, 8, 1)
    assert [(v.version, v.turn_no, v.match) for v in report.versions] == [
        (1, 1, True),
        (2, 2, True),
        (3, 4, True),
    ]


def test_a_fork_keeps_the_workspace_and_plan_of_its_turn(runtime: Runtime, engine: Engine) -> None:
    # Given a session that published v1, edited it to v2 and set a plan, then wrote v3
    _, (origin,) = make_run(engine)
    run_script(
        runtime,
        origin,
        [
            model_turn(call("manage_artifact", action="create", name="a.html", content=page())),
            model_turn(
                call(
                    "manage_artifact",
                    action="edit",
                    name="a.html",
                    content=page("v2"),
                    expected_version=1,
                ),
                call("plan_manage", action="set", items=["draw", "hand off"]),
            ),
            model_turn(
                call(
                    "manage_artifact",
                    action="edit",
                    name="a.html",
                    content=page("v3"),
                    expected_version=2,
                )
            ),
        ],
    )
    # When it is forked at turn 2 onto Gemini without a note, the sim's thought signatures
    # in the turn the fork continues are refused before anything is created
    with (
        pytest.raises(InputError, match=r"thought signatures of sim.*--brief-note"),
        engine.begin() as conn,
    ):
        create_fork(conn, session_id=origin, at_turn=2, now=utcnow(), model=GEMINI)
    # When it is forked at turn 2 onto Gemini with a note, which starts a new turn
    with engine.begin() as conn:
        made = create_fork(
            conn, session_id=origin, at_turn=2, now=utcnow(), model=GEMINI, note="Use blue."
        )
    # Then the fork's artifact is v2, as it was when turn 2 began, and its plan is set
    with engine.connect() as conn:
        current = get_artifact(conn, session_id=made.session_id, name="a.html")
        plan = get_plan(conn, session_id=made.session_id)
        log = session_log(conn, session_id=made.session_id)
        view = load_session(conn, session_id=made.session_id)
    assert current is not None and (current.version, current.content) == (2, page("v2"))
    assert [p.text for p in plan] == ["draw", "hand off"]
    # and its history ends with the note, which the model reads as turn 2's prompt
    assert (log[-1].turn_no, log[-1].kind, log[-1].payload["reason"]) == (2, "nudge", "note")
    assert (view.next_turn, view.status, view.model) == (2, "pending", GEMINI)
    contents = rebuild([decode(kind, payload) for kind, payload in view.events])
    assert contents[-1]["parts"][-1] == {"text": "Use blue."}
