"""Replay judges each recorded verdict again; a verdict that no longer holds is a MISMATCH."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from click.testing import CliRunner
from sqlalchemy import update

from scheduler.cli import cli
from tests.factories import make_run
from tests.worker.tasks.humaneval.test_sessions import _play
from verifier.verify import judge_submission
from worker.fleet.runtime import Runtime
from worker.runs.replay import replay_session
from worker.store.engine import utcnow
from worker.store.tables import verifications
from worker.tasks.base import Check, Submission, Task

pytestmark = pytest.mark.services


def _sloppy_session(runtime: Runtime) -> int:
    """A finished humaneval session: round 0 failed its hidden test, round 1 passed it."""
    _, (sid,) = make_run(runtime.engine, task="humaneval", sim_mix={"sloppy": 1.0})
    assert _play(runtime, sid) == "succeeded"
    return sid


def test_recorded_verdicts_replay_statically_and_in_the_sandbox(runtime: Runtime) -> None:
    sid = _sloppy_session(runtime)

    def sandbox(task: Task, submission: Submission) -> tuple[bool, Sequence[Check]]:
        verdict, _ = judge_submission(task, submission, settings=runtime.settings, browser=None)
        return verdict.passed, verdict.checks

    with runtime.engine.connect() as conn:
        static = replay_session(conn, session_id=sid, now=utcnow())
        whole = replay_session(conn, session_id=sid, now=utcnow(), judge=sandbox)
    # Statically, both rounds' compile checks hold; in the sandbox, the verdicts themselves
    assert static.ok and [(v.round, v.method, v.match) for v in static.verdicts] == [
        (0, "static", True),
        (1, "static", True),
    ]
    assert whole.ok and [(v.recorded, v.rejudged) for v in whole.verdicts] == [
        (False, False),
        (True, True),
    ]


def test_a_verdict_changed_after_the_fact_is_a_mismatch(runtime: Runtime) -> None:
    # Given a session whose passing verdict is rewritten as a failure
    sid = _sloppy_session(runtime)
    with runtime.engine.begin() as conn:
        conn.execute(
            update(verifications)
            .where(verifications.c.session_id == sid, verifications.c.round == 1)
            .values(passed=False)
        )
    url = ["--database-url", runtime.settings.database_url]
    # When it is replayed with the task's whole verifier
    result = CliRunner().invoke(cli, [*url, "replay", str(sid), "--browser"])
    # Then the verdict that no longer holds is a MISMATCH row, and the replay fails
    assert result.exit_code == 1, result.output
    rows = [line for line in result.output.splitlines() if "MISMATCH" in line]
    assert len(rows) == 1 and "solution.py v2" in rows[0]
    assert "MISMATCH: the verdict passes now, failed then" in rows[0]
    assert "does not replay: verdict of round 1" in result.output
    # and a static check recorded otherwise than it comes out is one too
    with runtime.engine.begin() as conn:
        conn.execute(
            update(verifications)
            .where(verifications.c.session_id == sid, verifications.c.round == 0)
            .values(checks=[{"name": "compiles", "passed": False, "value": "", "detail": ""}])
        )
    static = CliRunner().invoke(cli, [*url, "replay", str(sid)])
    assert static.exit_code == 1
    assert "MISMATCH: compiles passes now, failed then" in static.output
