"""A page is stored once: one ``blobs`` row shared by the artifact, its version, the event
that wrote it, and every session that wrote the same bytes; every reader sees it whole."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, func, select

from tests.factories import ScriptedModel, call, make_run, model_turn, page
from worker.agent.events import Feedback, ModelOutput, ToolResult
from worker.agent.frozen import freeze
from worker.agent.turn import run_turn
from worker.agent.workspace import get_artifact, live_files, write_artifact
from worker.fleet.runtime import Runtime
from worker.notices import user_text
from worker.reads.recorded import artifact_history, session_log
from worker.store.blobs import BLOB_MIN_CHARS, MARKER, restore, set_apart, sha256_of, unpack_sent
from worker.store.eventlog import stored_rows
from worker.store.sessions import add_events, load_session
from worker.store.tables import artifact_versions, artifacts, blobs, events, metadata, pack, unpack

#: A page long enough to be kept apart in the log (and not ASCII throughout).
PAGE = page("stored once — ✓").replace("</body>", "<!--" + "x" * 3000 + "--></body>")


def _payload(content: str) -> dict[str, Any]:
    turn = model_turn(call("manage_artifact", action="create", name="a.html", content=content))
    return ModelOutput(turn.content).to_payload()


# --- the payload as stored, without a database ---------------------------------------------


def test_long_strings_are_set_apart_and_put_back_without_changing_what_is_shared() -> None:
    # Given a model output whose call carries a page, frozen as a cached history holds it
    payload = freeze(_payload(PAGE))
    # When it is set apart for the log and restored from it
    apart = set_apart("model", payload)
    restored = restore(freeze(apart.payload), apart.refs, {apart.blobs[0].sha256: PAGE})
    # Then the page left the payload for one marker and one reference to its hash
    sha = sha256_of(PAGE)
    assert PAGE not in json.dumps(apart.payload)
    assert [b.sha256 for b in apart.blobs] == [sha]
    assert apart.blobs[0].size_bytes == len(PAGE.encode())
    assert apart.refs == [[["content", "parts", 0, "function_call", "args", "content"], sha]]
    # and came back byte for byte, while neither frozen input was changed (nor could be)
    assert restored == _payload(PAGE)
    assert payload == _payload(PAGE)


def test_short_strings_other_kinds_and_look_alike_markers_stay_as_they_are() -> None:
    short = _payload("x" * (BLOB_MIN_CHARS - 1))
    assert set_apart("model", short) == (short, None, [])
    # the verifier's findings are written by a role that may not add blobs
    feedback = Feedback(user_text("y" * 5000), 0).to_payload()
    assert set_apart("feedback", feedback).refs is None
    # a payload that looks like a marker is not one: only the event's references are restored
    look_alike = ToolResult("t", None, {"value": {MARKER: "0" * 64}}).to_payload()
    apart = set_apart("tool_result", look_alike)
    assert restore(apart.payload, apart.refs, {}) == look_alike


# --- the store ------------------------------------------------------------------------------


def _blob_rows(engine: Engine, content: str) -> int:
    with engine.connect() as conn:
        stored = conn.execute(select(blobs.c.content)).scalars().all()
    return stored.count(content)


@pytest.mark.services
def test_a_page_the_model_writes_is_one_row_shared_by_artifact_version_event_and_sessions(
    runtime: Runtime,
) -> None:
    # Given two sessions whose model writes the same page, then reads it back
    _, sids = make_run(runtime.engine, waves="1x2")
    scripts = {}
    for sid in sids:
        scripts[sid] = ScriptedModel(
            [
                model_turn(
                    call("manage_artifact", action="create", name="dashboard.html", content=PAGE)
                ),
                model_turn(call("manage_artifact", action="get", name="dashboard.html")),
                model_turn(call("plan_manage", action="list")),
            ]
        )
        # When their turns run
        for n in range(3):
            assert run_turn(rt=runtime, session_id=sid, turn_no=n, model=scripts[sid]).value == (
                "committed"
            )
    sha = sha256_of(PAGE)
    # Then the page is one row of blobs
    assert _blob_rows(runtime.engine, PAGE) == 1
    with runtime.engine.connect() as conn:
        # which both artifacts and both version rows name
        assert conn.execute(
            select(artifacts.c.session_id, artifacts.c.sha256).order_by(artifacts.c.session_id)
        ).all() == [(sid, sha) for sid in sids]
        assert conn.execute(select(artifact_versions.c.sha256)).scalars().all() == [sha, sha]
        # and so does each session's call and its read, in place of the page
        stored = conn.execute(
            select(events.c.kind, events.c.payload, events.c.blobs).where(
                events.c.blobs.isnot(None)
            )
        ).all()
        assert sorted(r.kind for r in stored) == ["model", "model", "tool_result", "tool_result"]
        assert all([sha] == [s for _, s in r.blobs] for r in stored)
        assert PAGE not in json.dumps([r.payload for r in stored])
        # while every reader gets it whole, byte for byte
        for sid in sids:
            logged = [e for e in session_log(conn, session_id=sid) if e.turn_no < 2]
            assert logged[1].payload["content"]["parts"][0]["function_call"]["args"] == {
                "action": "create",
                "name": "dashboard.html",
                "content": PAGE,
            }
            assert logged[4].payload["response"]["output"]["content"] == PAGE
            assert [v.content for v in artifact_history(conn, session_id=sid)] == [PAGE]
            assert live_files(conn, session_id=sid) == {"dashboard.html": PAGE}
            assert load_session(conn, session_id=sid).events[1][1] == logged[1].payload
    # and the model was sent the page whole in every later turn (the cached history too)
    for script in scripts.values():
        for request in script.requests[1:]:
            sent = request.history[1]["parts"][0]["function_call"]["args"]["content"]
            assert sent == PAGE
        last = script.requests[-1].history[4]["parts"][0]["function_response"]
        assert last["response"]["output"]["content"] == PAGE


def test_on_sqlite_the_page_is_stored_once_too() -> None:
    # Given the embedded database, with a session's rows
    engine = create_engine("sqlite://")
    now = datetime.now(UTC)
    with engine.begin() as conn:
        metadata.create_all(conn)
        run: dict[str, Any] = {"profile": "p", "model": "sim", "config": {}, "prefix_sha256": ""}
        conn.execute(
            metadata.tables["runs"].insert().values(id=1, created_at=now, status="pending", **run)
        )
        conn.execute(
            metadata.tables["waves"]
            .insert()
            .values(id=1, run_id=1, index=1, size=2, status="pending")
        )
        for sid in (1, 2):
            conn.execute(
                metadata.tables["sessions"]
                .insert()
                .values(id=sid, run_id=1, wave_id=1, index=sid, persona="p", brief={})
            )
            # When each writes the page and logs the call that wrote it
            assert write_artifact(
                conn,
                session_id=sid,
                name="a.html",
                content=PAGE,
                size_bytes=len(PAGE.encode()),
                expected_version=None,
                turn_no=0,
                now=now,
            )
            add_events(
                conn,
                session_id=sid,
                turn_no=0,
                items=[ModelOutput(_payload(PAGE)["content"])],
                now=now,
            )
        # Then one row holds it, and each session reads it whole
        assert conn.execute(select(func.count()).select_from(blobs)).scalar_one() == 1
        for sid in (1, 2):
            state = get_artifact(conn, session_id=sid, name="a.html")
            assert state is not None and state.content == PAGE
            assert load_session(conn, session_id=sid).events == [("model", _payload(PAGE))]
    engine.dispose()


def test_restore_copies_only_where_it_puts_texts_back() -> None:
    payload = {"a": {"b": "stored"}, "c": {"d": 1}}
    restored = restore(payload, [[["a", "b"], "k"]], {"k": "text"})
    assert restored == {"a": {"b": "text"}, "c": {"d": 1}}
    assert payload == {"a": {"b": "stored"}, "c": {"d": 1}}
    assert restored["c"] is payload["c"]
    with pytest.raises(LookupError, match="not stored"):
        restore(copy.deepcopy(payload), [[["a", "b"], "k"]], {})


def test_a_commit_does_not_send_again_a_text_its_transaction_stored_or_read() -> None:
    # Given a turn's events, one of them carrying a page the turn's write stored already
    items = [("model", _payload(PAGE)), ("tool_result", {"response": {"output": {"n": 1}}})]
    # When the commit's rows are made
    sent = stored_rows(items, first_seq=3, known={sha256_of(PAGE)})
    fresh = stored_rows(items, first_seq=3)
    # Then the event still names the page, but the page itself is not sent twice
    assert [r["seq"] for r in sent["e_rows"]] == [3, 4]
    assert sent["e_rows"][0]["blobs"] == [
        [["content", "parts", 0, "function_call", "args", "content"], sha256_of(PAGE)]
    ]
    assert sent["x_blobs"] == []
    # and a text sent is packed: about a third of the page
    ((row),) = fresh["x_blobs"]
    assert unpack_sent(row["content"]) == PAGE
    assert len(row["content"]) < len(PAGE.encode()) / 2
    assert unpack(pack(PAGE)) == PAGE
