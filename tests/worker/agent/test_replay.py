"""Replay: a session re-enacted from its event log gives back every artifact version, byte
for byte; a log or a version changed after the fact does not."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner, Result
from sqlalchemy import Engine, select, update

from scheduler.cli import cli
from scheduler.cli.follow import until_finished
from tests.conftest import WorkerProcess
from tests.factories import make_run
from worker.agent.replay import replay_session
from worker.fleet.dispatch import CeleryDispatcher
from worker.settings import Settings
from worker.store.engine import utcnow
from worker.store.lifecycle import Dispatch
from worker.store.tables import artifact_versions, events, sessions

pytestmark = [pytest.mark.services, pytest.mark.slow]

#: Seconds a whole run in these tests may take.
RUN_TIMEOUT_S = 120


def long_session(
    settings: Settings, engine: Engine, app: Any, start_worker: Callable[..., WorkerProcess]
) -> int:
    """A finished sim session of ten turns or more, run by a real worker; its id.

    An explorer probes the tools for 6 to 14 turns before it plans, publishes, refines and
    hands off; the idle-turn guard is raised so that it is not stopped for exploring, and
    every first draft carries a defect for the verifier to send back.
    """
    start_worker()
    _, (session_id,) = make_run(
        engine,
        sim_mix={"explorer": 1.0},
        loop_idle_turns=30,
        sim_flaw_rate=1.0,
        seed=21,
    )
    CeleryDispatcher(app).send(Dispatch(session_id, "turn", 0))
    run_id = _run_of(engine, session_id)
    status = until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
    assert status.turns >= 10, status
    assert status.artifacts.versions >= 2, status
    return session_id


def _run_of(engine: Engine, session_id: int) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(select(sessions.c.run_id).where(sessions.c.id == session_id)).scalar_one()
        )


def scheduler(settings: Settings, *args: str) -> Result:
    """``python -m scheduler ARGS`` in-process, against the test services."""
    return CliRunner().invoke(
        cli,
        ["--database-url", settings.database_url, "--broker-url", settings.broker_url, *args],
    )


def test_a_ten_turn_session_replays_byte_for_byte(
    settings: Settings, engine: Engine, app: Any, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given a finished session of ten turns or more
    session_id = long_session(settings, engine, app, start_worker)
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
    settings: Settings, engine: Engine, app: Any, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given a long session that replays
    session_id = long_session(settings, engine, app, start_worker)
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
