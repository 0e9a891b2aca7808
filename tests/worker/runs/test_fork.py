"""Fork: a new run continues a session's history from turn N, live, and records its origin."""

from __future__ import annotations

import copy
import json
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select

from ops.fake_gemini import FakeGemini, SimConfig
from scheduler.cli.follow import until_finished
from tests.conftest import ROOT, WorkerProcess
from tests.factories import enqueue
from tests.worker.runs.conftest import RUN_TIMEOUT_S, scheduler
from worker.reads.recorded import LoggedEvent, session_log
from worker.runs.replay import replay_session
from worker.settings import Settings
from worker.store.engine import utcnow
from worker.store.tables import artifact_versions, artifacts, runs, sessions, usage

pytestmark = [pytest.mark.services, pytest.mark.slow]

MODEL = "gemini-3-flash-preview"


def _log(engine: Engine, session_id: int) -> list[LoggedEvent]:
    with engine.connect() as conn:
        return session_log(conn, session_id=session_id)


def _versions(engine: Engine, session_id: int) -> list[tuple[int, int, str]]:
    with engine.connect() as conn:
        rows = conn.execute(
            select(
                artifact_versions.c.version, artifact_versions.c.turn_no, artifact_versions.c.sha256
            )
            .join(artifacts)
            .where(artifacts.c.session_id == session_id)
            .order_by(artifact_versions.c.version)
        ).all()
    return [(r.version, r.turn_no, r.sha256) for r in rows]


def _fork_of(engine: Engine, run_id: int) -> tuple[int, int, int]:
    """(origin session, at turn, fork session) of a fork's run."""
    with engine.connect() as conn:
        row = conn.execute(
            select(runs.c.forked_from_session_id, runs.c.forked_at_turn, sessions.c.id)
            .join(sessions, sessions.c.run_id == runs.c.id)
            .where(runs.c.id == run_id)
        ).one()
    return row.forked_from_session_id, row.forked_at_turn, row.id


def test_a_fork_at_turn_n_continues_live_and_records_its_origin(
    settings: Settings, engine: Engine, long_session: Callable[..., int], tmp_path: Path
) -> None:
    # Given a finished session of ten turns or more, and the turn that wrote its second version
    origin = long_session()
    versions = _versions(engine, origin)
    at_turn = versions[1][1]
    # When it is forked at that turn on the fleet, and followed to its end
    result = scheduler(settings, "fork", str(origin), "--at-turn", str(at_turn), "--follow")
    # Then the fork's run succeeded and records where it came from
    assert result.exit_code == 0, result.output
    fork_run = int(result.stdout.split()[1].rstrip(":"))
    assert _fork_of(engine, fork_run)[:2] == (origin, at_turn)
    fork = _fork_of(engine, fork_run)[2]
    # and its history before that turn is the origin's, event for event
    origin_log, fork_log = _log(engine, origin), _log(engine, fork)
    assert [e for e in fork_log if e.turn_no < at_turn] == [
        e for e in origin_log if e.turn_no < at_turn
    ]
    # and its workspace was the origin's at that turn; what came later it wrote live, and
    # the same deterministic model wrote the same bytes again
    assert _versions(engine, fork) == versions
    with engine.connect() as conn:
        live = sorted(
            conn.execute(select(usage.c.turn_no).where(usage.c.session_id == fork)).scalars()
        )
        later = sorted(
            conn.execute(
                select(usage.c.turn_no).where(
                    usage.c.session_id == origin, usage.c.turn_no >= at_turn
                )
            ).scalars()
        )
        assert live == later and live[0] == at_turn
        assert replay_session(conn, session_id=fork, now=utcnow()).ok
    # and the report of the origin's run shows the fork next to it from that turn on
    with engine.connect() as conn:
        origin_run = conn.execute(
            select(sessions.c.run_id).where(sessions.c.id == origin)
        ).scalar_one()
    out = json.loads(scheduler(settings, "report", str(origin_run), "--json").stdout)
    (figures,) = out["forks"]
    assert figures["at_turn"] == at_turn
    assert (figures["origin"]["session_id"], figures["fork"]["session_id"]) == (origin, fork)
    assert figures["fork"]["turns"] == len(live) == figures["origin"]["turns"]
    assert figures["fork"]["outcome"] == figures["origin"]["outcome"] == "verified"
    text = scheduler(settings, "report", str(fork_run)).stdout
    assert "forks next to their origins" in text and f"{fork_run}/{fork}" in text
    html = tmp_path / "report.html"
    assert scheduler(settings, "report", str(fork_run), "--html", str(html)).exit_code == 0
    assert "Forks, from the turn each went live" in html.read_text(encoding="utf-8")


def test_a_fork_after_a_verdict_repairs_and_bad_turns_are_one_line(
    settings: Settings, engine: Engine, long_session: Callable[..., int]
) -> None:
    # Given a session whose handoff the browser verifier sent back for repair
    origin = long_session(seed=23, SWARM_VERIFIER="browser")
    log = _log(engine, origin)
    (feedback,) = [e for e in log if e.kind == "feedback"]
    with engine.connect() as conn:
        next_turn = conn.execute(
            select(sessions.c.next_turn).where(sessions.c.id == origin)
        ).scalar_one()
    # When it is forked at the turn the verifier's findings opened
    at_turn = feedback.turn_no
    result = scheduler(settings, "fork", str(origin), "--at-turn", str(at_turn), "--follow")
    # Then the fork read those findings, repaired in its round 1, and was verified
    assert result.exit_code == 0, result.output
    fork_run = int(result.stdout.split()[1].rstrip(":"))
    fork = _fork_of(engine, fork_run)[2]
    assert feedback in _log(engine, fork)
    with engine.connect() as conn:
        row = conn.execute(
            select(sessions.c.repair_round, sessions.c.outcome).where(sessions.c.id == fork)
        ).one()
    assert (row.repair_round, row.outcome) == (1, "verified")
    # and a turn out of range, or right after the handoff that passed, is one error line
    for turn, message in (
        (next_turn + 1, f"--at-turn takes 0 to {next_turn}"),
        (next_turn, "hands off its artifact"),
    ):
        result = scheduler(settings, "fork", str(origin), "--at-turn", str(turn))
        assert result.exit_code == 2
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith("error: ") and message in line
    with engine.connect() as conn:
        assert len(conn.execute(select(runs.c.id)).scalars().all()) == 2


class RecordingGemini(FakeGemini):
    """The fake Gemini API, keeping every ``generateContent`` body it was sent."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bodies: list[dict[str, Any]] = []
        self._bodies_lock = threading.Lock()

    def answer(
        self, model: str, body: Any, *, api_key: str, forced: str | None = None
    ) -> tuple[int, Any, Any]:
        with self._bodies_lock:
            self.bodies.append(copy.deepcopy(body))
        return super().answer(model, body, api_key=api_key, forced=forced)


def _turn(body: dict[str, Any]) -> int:
    return sum(1 for c in body["contents"] if c.get("role") == "model")


def test_a_forks_prompt_is_the_origins_up_to_turn_n(
    settings: Settings, engine: Engine, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given a finished Gemini session, its requests recorded by the fake API
    fake = RecordingGemini(sim=SimConfig(latency_ms=20))
    fake.start()
    try:
        start_worker(SWARM_GEMINI_BASE_URL=fake.url, GEMINI_API_KEY="test-key")
        run_id = enqueue(settings, "--wave", "1x1", model=MODEL, seed=11)
        until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
        with engine.connect() as conn:
            origin = conn.execute(
                select(sessions.c.id).where(sessions.c.run_id == run_id)
            ).scalar_one()
        at_turn = 2
        (asked,) = [b for b in fake.bodies if _turn(b) == at_turn]
        seen = len(fake.bodies)
        # When it is forked at turn 2, through the same SDK and fake API
        result = scheduler(settings, "fork", str(origin), "--at-turn", "2", "--follow")
        assert result.exit_code == 0, result.output
        forked = fake.bodies[seen:]
        # Then the fork's first request is the origin's request for turn 2, byte for byte
        assert _turn(forked[0]) == at_turn
        assert json.dumps(forked[0], sort_keys=True) == json.dumps(asked, sort_keys=True)
        # and it went on live from there
        assert len(forked) >= 2 and [_turn(b) for b in forked] == list(
            range(at_turn, at_turn + len(forked))
        )
        # When it is forked again with a note for the agent
        seen = len(fake.bodies)
        note = "Keep the page under 20 KB."
        result = scheduler(
            settings, "fork", str(origin), "--at-turn", "2", "--brief-note", note, "--follow"
        )
        assert result.exit_code == 0, result.output
        first = fake.bodies[seen]
    finally:
        fake.stop()
    # Then its first request is the origin's with the note after turn 1's tool results
    *same, last = first["contents"]
    assert same == asked["contents"][:-1]
    assert last["parts"] == [*asked["contents"][-1]["parts"], {"text": note}]


def test_a_fork_on_the_embedded_default(tmp_path: Path) -> None:
    # Given a session run on the embedded default (a SQLite file, an in-process worker)
    database = tmp_path / "swarm.db"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SWARM_")},
        "PYTHONPATH": str(ROOT),
        "SWARM_VERIFIER": "static",
    }

    def scheduler_here(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "scheduler", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )

    ran = scheduler_here(
        "run", "--wave", "1", "--sim-latency-ms", "0", "--seed", "3", "--database",
        f"sqlite:///{database}", "--json",
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    origin_run = json.loads(ran.stdout)["run_id"]
    # When its session is forked at turn 1, on the same file
    forked = scheduler_here(
        "--database-url", f"sqlite:///{database}", "fork", "1", "--at-turn", "1",
        "--profile", "baseline", "--json",
    )  # fmt: skip
    # Then the fork ran in this process, to its end, under the profile it was given
    assert forked.returncode in (0, 1), forked.stderr[-3000:]
    status = json.loads(forked.stdout)
    assert status["profile"] == "baseline" and status["sessions"]["total"] == 1
    assert status["finished_at"] is not None and status["turns"] >= 1
    (fork,) = status["forks"]
    assert (fork["at_turn"], fork["origin"]["run_id"]) == (1, origin_run)
    with sqlite3.connect(database) as db:
        row = db.execute(
            "SELECT forked_from_session_id, forked_at_turn FROM runs WHERE id = ?",
            (status["run_id"],),
        ).fetchone()
    assert row == (1, 1)
