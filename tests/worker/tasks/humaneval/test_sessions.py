"""HumanEval sessions on the store: start files at version 0, the sandbox queue, and hidden
fields that never leave the verifier."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import select, update

from tests.conftest import RecordingDispatcher
from tests.factories import make_run
from verifier.verify import verify_handoff
from worker.agent.turn import run_turn
from worker.errors import InputError
from worker.fleet.runtime import Runtime
from worker.reads.figures import run_figures
from worker.reads.queries import session_rows
from worker.runs.fork import create_fork
from worker.runs.replay import replay_session
from worker.store.engine import utcnow
from worker.store.tables import artifact_versions, artifacts, blobs, events, runs, sessions
from worker.tasks.humaneval.task import task as humaneval

pytestmark = pytest.mark.services


def _play(rt: Runtime, sid: int) -> str:
    """Run a sim session's turns and verdicts in this process until it ends; its status."""
    assert isinstance(rt.dispatcher, RecordingDispatcher)
    for _ in range(20):
        with rt.engine.connect() as conn:
            row = conn.execute(
                select(sessions.c.status, sessions.c.next_turn, sessions.c.repair_round).where(
                    sessions.c.id == sid
                )
            ).one()
        if row.status == "running":
            run_turn(rt=rt, session_id=sid, turn_no=row.next_turn)
        elif row.status == "verifying":
            verify_handoff(rt, session_id=sid, round_no=row.repair_round, browser=None)
        else:
            return str(row.status)
    raise AssertionError("the session never ended")


def _hidden(instance_id: str) -> list[str]:
    """Lines of an instance's hidden test no prompt could hold by chance."""
    test = humaneval.instance(instance_id).hidden["test"]
    return [line.strip() for line in test.splitlines() if line.strip().startswith("assert")]


def test_an_oracle_session_starts_from_the_prompt_and_is_judged_on_the_sandbox_queue(
    runtime: Runtime,
) -> None:
    # Given a humaneval run of one oracle session on HumanEval/3
    _, (sid,) = make_run(
        runtime.engine, task="humaneval", instances="HumanEval/3", sim_mix={"oracle": 1.0}
    )
    instance = humaneval.instance("HumanEval/3")
    # Then it starts with solution.py at version 0, the problem's prompt
    with runtime.engine.connect() as conn:
        start = conn.execute(
            select(artifacts.c.name, artifact_versions.c.version, blobs.c.content)
            .join(artifact_versions)
            .join(blobs, blobs.c.sha256 == artifact_versions.c.sha256)
            .where(artifacts.c.session_id == sid)
        ).all()
    assert [tuple(r) for r in start] == [("solution.py", 0, instance.public["prompt"])]
    # When it plays to its end
    status = _play(runtime, sid)
    # Then its handoff went to the sandbox queue's verifier, and it passed there
    assert isinstance(runtime.dispatcher, RecordingDispatcher)
    verifies = [d for d in runtime.dispatcher.sent if d.kind == "verify"]
    assert [d.verifier for d in verifies] == ["python"]
    assert status == "succeeded"
    with runtime.engine.connect() as conn:
        (row,) = session_rows(conn, 1)
    assert (row.instance, row.versions) == ("HumanEval/3", 1)


def test_hidden_fields_reach_no_prompt_event_report_replay_or_fork(runtime: Runtime) -> None:
    # Given sessions that failed and repaired on hidden tests (sloppy agents)
    run_id, sids = make_run(
        runtime.engine, waves="1x2", task="humaneval", instances="0-1", sim_mix={"sloppy": 1.0}
    )
    for sid in sids:
        assert _play(runtime, sid) == "succeeded"
    # When everything a person or a model could read of the run is gathered
    with runtime.engine.connect() as conn:
        seen: list[Any] = [
            *conn.execute(select(events.c.payload).where(events.c.session_id.in_(sids))).scalars(),
            *conn.execute(select(sessions.c.brief).where(sessions.c.run_id == run_id)).scalars(),
            # the texts the log keeps apart (pages, long tool results)
            *conn.execute(select(blobs.c.content)).scalars(),
        ]
        seen.append(repr(run_figures(conn, run_id, prices=runtime.prices)))
        seen += [repr(replay_session(conn, session_id=sid, now=utcnow())) for sid in sids]
    with runtime.engine.begin() as conn:
        fork = create_fork(conn, session_id=sids[0], at_turn=2, now=utcnow())
        seen += conn.execute(
            select(events.c.payload).where(events.c.session_id == fork.session_id)
        ).scalars()
    text = json.dumps(seen, default=str)
    # Then no line of a hidden test is in it (the findings the agent read included)
    assert "repair round" in text
    for instance_id in ("HumanEval/0", "HumanEval/1"):
        for line in _hidden(instance_id):
            assert line not in text, line


def test_a_humaneval_session_replays_from_version_0_and_refuses_a_changed_task(
    runtime: Runtime,
) -> None:
    # Given a finished sloppy session (version 0, a wrong edit, a repair)
    _, (sid,) = make_run(runtime.engine, task="humaneval", sim_mix={"sloppy": 1.0})
    assert _play(runtime, sid) == "succeeded"
    # When it is replayed
    with runtime.engine.connect() as conn:
        report = replay_session(conn, session_id=sid, now=utcnow())
    # Then every version matched, the starting file included
    assert report.ok, report.problem
    assert [v.version for v in report.versions] == [0, 1, 2]
    # And once the run's record of its task no longer matches the task, replay refuses
    with runtime.engine.begin() as conn:
        conn.execute(update(runs).values(task_sha256="0" * 64))
    with runtime.engine.connect() as conn, pytest.raises(InputError, match="changed since"):
        replay_session(conn, session_id=sid, now=utcnow())
