"""The standard personas of any task, played from what the task gives.

``oracle`` writes :meth:`~worker.tasks.base.Task.solution` and hands it off; ``null`` hands
off the starting files as they are; ``sloppy`` hands off :meth:`~worker.tasks.base.Task.wrong`
first and the solution after the verifier's findings; ``cheat`` hands off one of
:meth:`~worker.tasks.base.Task.cheats`, and the next one after each finding. Each writes its
files in one turn and hands off in the next, as an agent that checks its work would.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from worker.models.base import Content, FunctionCall, ModelRequest, calls_of
from worker.models.sim.player import Move
from worker.models.sim.transcript import read

if TYPE_CHECKING:
    from worker.tasks.base import Instance, Task

__all__ = ["ScriptPlayer", "standard_player"]


class ScriptPlayer:
    """Writes one set of files a round and hands off the main one.

    Args:
        attempts: The files of each round, in order; the last is kept once they run out.
        start: The files the session starts with (at version 0).
        main: The file it hands off.
        summary: What its handoff says.
    """

    def __init__(
        self,
        attempts: Sequence[Mapping[str, str]],
        *,
        start: Mapping[str, str],
        main: str,
        summary: str,
    ) -> None:
        self.attempts = [dict(a) for a in attempts] or [{}]
        self.start = dict(start)
        self.main = main
        self.summary = summary

    def play(self, request: ModelRequest) -> Move:
        """The round's writes, or the handoff once they are made."""
        t = read(request.history)
        if t.turns == 0 or t.feedback:
            files = self.attempts[min(t.rounds, len(self.attempts) - 1)]
            current = {**self.start, **_written(request.history)}
            writes = tuple(
                self._write(name, content, t.versions.get(name))
                for name, content in files.items()
                if current.get(name) != content
            )
            if writes:
                return Move(writes)
        return Move(
            (FunctionCall("handoff", {"summary": self.summary, "artifact_name": self.main}),)
        )

    def _write(self, name: str, content: str, version: int | None) -> FunctionCall:
        if version is None and name not in self.start:
            return FunctionCall(
                "manage_artifact", {"action": "create", "name": name, "content": content}
            )
        args: dict[str, Any] = {
            "action": "edit",
            "name": name,
            "content": content,
            "expected_version": 0 if version is None else version,
        }
        return FunctionCall("manage_artifact", args)


def _written(history: Sequence[Content]) -> dict[str, str]:
    """The last content this agent sent for each file (create or edit of a whole file)."""
    sent: dict[str, str] = {}
    for content in history:
        if content["role"] != "model":
            continue
        for call in calls_of(content):
            args = call.args
            if (
                call.name == "manage_artifact"
                and args.get("action") in ("create", "edit")
                and "region_id" not in args
                and isinstance(args.get("name"), str)
                and isinstance(args.get("content"), str)
            ):
                sent[args["name"]] = args["content"]
    return sent


def standard_player(task: Task, instance: Instance, persona: str, *, index: int) -> ScriptPlayer:
    """The player of one of the standard personas (``oracle``, ``null``, ``cheat``, ``sloppy``).

    Raises:
        ValueError: not a standard persona (a task with more personas plays them itself).
    """
    public = instance.without_hidden()
    start = task.files(public)
    if persona == "oracle":
        attempts: Sequence[Mapping[str, str]] = [task.solution(instance)]
    elif persona == "null":
        attempts = [start]
    elif persona == "sloppy":
        attempts = [task.wrong(instance), task.solution(instance)]
    elif persona == "cheat":
        cheats = list(task.cheats(instance)) or [start]
        # Sessions of one instance try the cheats in different orders.
        at = index % len(cheats)
        attempts = cheats[at:] + cheats[:at]
    else:
        raise ValueError(f"task {task.name} has no player for persona {persona!r}")
    return ScriptPlayer(
        attempts,
        start=start,
        main=task.main_artifact(public),
        summary=f"{task.name} {instance.id}: done.",
    )
