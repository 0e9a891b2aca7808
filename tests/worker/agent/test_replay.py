"""Replay: a session re-enacted from its event log gives back every artifact version, byte
for byte; a log or a version changed after the fact does not."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import Engine, select, update

from tests.worker.agent.conftest import scheduler
from worker.agent.replay import replay_session
from worker.settings import Settings
from worker.store.engine import utcnow
from worker.store.tables import artifact_versions, events

pytestmark = [pytest.mark.services, pytest.mark.slow]


def test_a_ten_turn_session_replays_byte_for_byte(
    settings: Settings, engine: Engine, long_session: Callable[[], int]
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
    matched = [line for line in lines if line.endswith(" match")]
    assert len(matched) == len(recorded) >= 2
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
    settings: Settings, engine: Engine, long_session: Callable[[], int]
) -> None:
    # Given a long session that replays
    session_id = long_session()
    with engine.connect() as conn:
        assert replay_session(conn, session_id=session_id, now=utcnow()).ok
    # When one byte of its second version is changed in the database
    with engine.begin() as conn:
        v2 = conn.execute(
            select(artifact_versions.c.id, artifact_versions.c.content).where(
                artifact_versions.c.version == 2
            )
        ).one()
        conn.execute(
            update(artifact_versions)
            .where(artifact_versions.c.id == v2.id)
            .values(content=v2.content.replace("<", "[", 1))
        )
    result = scheduler(settings, "replay", str(session_id))
    # Then the replay fails on that version, in one error line, with a non-zero exit
    assert result.exit_code == 1
    assert "v2" in next(line for line in result.stdout.splitlines() if "MISMATCH" in line)
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: session {session_id} does not replay: dashboard.html v2")
    # Given the version put back, when a recorded model call is changed instead
    with engine.begin() as conn:
        conn.execute(
            update(artifact_versions)
            .where(artifact_versions.c.id == v2.id)
            .values(content=v2.content)
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
        select(events.c.id, events.c.payload).where(
            events.c.session_id == session_id, events.c.kind == "model"
        )
    ).all()
    for row in rows:
        parts = row.payload["content"]["parts"]
        for part in parts:
            call = part.get("function_call") or {}
            if call.get("args", {}).get("action") == "create":
                call["args"]["content"] = call["args"]["content"].replace("<", "[", 1)
                conn.execute(
                    update(events).where(events.c.id == row.id).values(payload=row.payload)
                )
                return
    raise AssertionError("no create call in the log")


def test_replay_of_a_missing_session_is_one_line(settings: Settings) -> None:
    result = scheduler(settings, "replay", "987654")
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: no session 987654"
