"""A handoff judged by static checks alone is judged in the handoff's own commit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from sqlalchemy import select

from tests.factories import ScriptedModel, call, make_run, model_turn, page
from worker.agent.turn import TurnOutcome, run_turn
from worker.fleet.runtime import Runtime
from worker.store.tables import events, sessions, verifications
from worker.tasks import Check, Instance, Submission, Task

pytestmark = pytest.mark.services


class Capital(Task):
    """A static task: the hidden answer is checked by the task's own judgement."""

    name = "capital"

    def instances(self) -> Sequence[Instance]:
        return [Instance("fr", {"country": "France"}, {"capital": "Paris"})]

    def instructions(self, instance: Instance) -> str:
        return f"Write answer.txt with the capital of {instance.public['country']}."

    def judge(self, submission: Submission) -> list[Check]:
        expected = submission.instance.hidden["capital"]
        right = submission.files["answer.txt"].strip() == expected
        return [Check("answer", right, submission.content, "the capital, and nothing else")]

    def solution(self, instance: Instance) -> Mapping[str, str]:
        return {"answer.txt": instance.hidden["capital"]}


task = Capital()
REF = f"{__name__}:task"


def _answer(text: str, *, version: int | None = None) -> Any:
    write = (
        call("manage_artifact", action="create", name="answer.txt", content=text)
        if version is None
        else call(
            "manage_artifact",
            action="edit",
            name="answer.txt",
            content=text,
            expected_version=version,
        )
    )
    return model_turn(
        write,
        call("handoff", summary="done", artifact_name="answer.txt"),
    )


def _verdicts(rt: Runtime, sid: int) -> list[tuple[int, bool, str]]:
    with rt.engine.connect() as conn:
        return [
            (r.round, r.passed, r.method)
            for r in conn.execute(
                select(verifications.c.round, verifications.c.passed, verifications.c.method)
                .where(verifications.c.session_id == sid)
                .order_by(verifications.c.round)
            )
        ]


def _status(rt: Runtime, sid: int) -> tuple[str, str | None, int]:
    with rt.engine.connect() as conn:
        row = conn.execute(
            select(sessions.c.status, sessions.c.outcome, sessions.c.repair_round).where(
                sessions.c.id == sid
            )
        ).one()
    return row.status, row.outcome, row.repair_round


def test_a_static_task_is_judged_with_its_handoff_and_repaired(runtime: Runtime) -> None:
    # Given a session of a static task, its hidden answer "Paris"
    _, (sid,) = make_run(runtime.engine, task=REF, repair_rounds=1)
    sent = runtime.dispatcher.sent  # type: ignore[attr-defined]
    # When it hands off a wrong answer
    outcome = run_turn(rt=runtime, session_id=sid, turn_no=0, model=ScriptedModel([_answer("X")]))
    # Then the verdict is recorded in that turn's commit, the session goes to its repair
    # round with the verifier's findings, and its next turn is sent, not a verify task
    assert outcome is TurnOutcome.committed
    assert _verdicts(runtime, sid) == [(0, False, "static")]
    assert _status(runtime, sid) == ("running", None, 1)
    assert [(d.kind, d.number) for d in sent] == [("turn", 1)]
    with runtime.engine.connect() as conn:
        feedback = conn.execute(
            select(events.c.turn_no).where(events.c.session_id == sid, events.c.kind == "feedback")
        ).all()
    assert [f.turn_no for f in feedback] == [1]
    # When it hands the right answer off
    outcome = run_turn(
        rt=runtime, session_id=sid, turn_no=1, model=ScriptedModel([_answer("Paris", version=1)])
    )
    # Then that turn ends the session, verified
    assert outcome is TurnOutcome.ended
    assert _verdicts(runtime, sid) == [(0, False, "static"), (1, True, "static")]
    assert _status(runtime, sid) == ("succeeded", "verified", 1)
    assert [d.kind for d in sent] == ["turn"]


def test_a_run_that_asks_for_static_verdicts_ends_with_its_handoff(runtime: Runtime) -> None:
    # Given a run of pages that asks for static verdicts
    _, (sid,) = make_run(runtime.engine, verify="static")
    handoff = model_turn(
        call("manage_artifact", action="create", name="dashboard.html", content=page()),
        call("handoff", summary="done", artifact_name="dashboard.html"),
    )
    # When a session hands its page off
    outcome = run_turn(rt=runtime, session_id=sid, turn_no=0, model=ScriptedModel([handoff]))
    # Then the page's static checks are its verdict, recorded in the handoff's commit
    assert outcome is TurnOutcome.ended
    assert _verdicts(runtime, sid) == [(0, True, "static")]
    assert _status(runtime, sid) == ("succeeded", "verified", 0)
    assert runtime.dispatcher.sent == []  # type: ignore[attr-defined]
