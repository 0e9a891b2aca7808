"""A task's own tool: declared after the artifact tools, validated, answered, replayed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from sqlalchemy import select

from tests.factories import ScriptedModel, call, make_run, model_turn
from worker.agent.prompt import build_prefix
from worker.agent.turn import run_turn
from worker.errors import ToolError
from worker.fleet.runtime import Runtime
from worker.profiles import get_profile
from worker.runs.replay import replay_session
from worker.store.engine import utcnow
from worker.store.tables import events
from worker.tasks import Instance, Task, TaskTool, ToolArgs, Workspace

pytestmark = pytest.mark.services


class Lookup(ToolArgs):
    """Look a word up in the task's glossary."""

    word: str
    """The word."""


def lookup(args: Lookup, workspace: Workspace) -> dict[str, Any]:
    glossary = workspace.public["glossary"]
    if args.word not in glossary:
        raise ToolError(f"no entry for {args.word}", kind="not_found", hint="try another word")
    return {"word": args.word, "means": glossary[args.word], "files": sorted(workspace.files)}


class Glossary(Task):
    name = "glossary"

    def instances(self) -> Sequence[Instance]:
        return [Instance("g", {"glossary": {"cat": "a small feline"}})]

    def instructions(self, instance: Instance) -> str:
        return "Write notes.txt with what cat means."

    def files(self, instance: Instance) -> Mapping[str, str]:
        return {"notes.txt": ""}

    def tools(self) -> Sequence[TaskTool]:
        return [TaskTool("lookup", Lookup, lookup)]

    def solution(self, instance: Instance) -> Mapping[str, str]:
        return {"notes.txt": "cat: a small feline"}


task = Glossary()
REF = f"{__name__}:task"


def test_a_task_tool_is_declared_after_the_artifact_tools() -> None:
    prefix = build_prefix(task, get_profile("candidate"))
    assert [t.name for t in prefix.tools] == ["manage_artifact", "plan_manage", "handoff", "lookup"]
    lookup_spec = prefix.tools[-1]
    assert lookup_spec.description == "Look a word up in the task's glossary."
    assert lookup_spec.parameters["properties"]["word"]["description"] == "The word."


def test_a_task_tool_answers_refuses_and_replays(runtime: Runtime) -> None:
    # Given a session of the glossary task
    _, (sid,) = make_run(runtime.engine, task=REF)
    # When its model looks words up: one the glossary has, one it lacks, one with bad args
    model = ScriptedModel(
        [
            model_turn(call("lookup", word="cat"), call("lookup", word="dog")),
            model_turn(call("lookup", word=3)),
        ]
    )
    for turn_no in range(2):
        run_turn(rt=runtime, session_id=sid, turn_no=turn_no, model=model)
    with runtime.engine.connect() as conn:
        answers = [
            (kind, payload["response"])
            for kind, payload in conn.execute(
                select(events.c.kind, events.c.payload)
                .where(events.c.session_id == sid, events.c.kind.in_(["tool_result", "tool_error"]))
                .order_by(events.c.turn_no, events.c.seq)
            )
        ]
    # Then the model saw the answer (with the session's files), the refusal with its hint,
    # and the schema's complaint
    assert answers[0] == (
        "tool_result",
        {"output": {"word": "cat", "means": "a small feline", "files": ["notes.txt"]}},
    )
    assert answers[1][0] == "tool_error" and answers[1][1]["error"]["hint"] == "try another word"
    assert answers[2][0] == "tool_error" and answers[2][1]["error"]["kind"] == "bad_arguments"
    # And the session replays: the tool answers again as it did
    with runtime.engine.connect() as conn:
        report = replay_session(conn, session_id=sid, now=utcnow())
    assert report.ok and report.calls == 3, report.problem
