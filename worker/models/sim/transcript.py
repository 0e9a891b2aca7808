"""What a conversation so far tells a scripted agent: turns, versions, errors and findings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from worker.models.base import Content, FunctionCall, calls_of
from worker.notices import FEEDBACK_OPENING, LOOP_HINT

__all__ = ["Transcript", "read"]

#: Calls that write a file, each answered with the version it made.
_WRITES = ("create", "edit")


@dataclass
class Transcript:
    """The facts a player acts on, read from the request's history."""

    turns: int = 0
    """Model turns so far: the number of the turn being decided."""
    versions: dict[str, int] = field(default_factory=dict)
    """The version of each artifact last seen: written, read, or named by a conflict."""
    writes: dict[str, int] = field(default_factory=dict)
    """Successful writes of each artifact."""
    errors: int = 0
    """Tool errors so far."""
    last_errors: list[dict[str, Any]] = field(default_factory=list)
    """The errors of the last turn's calls."""
    last_results: list[tuple[FunctionCall, dict[str, Any]]] = field(default_factory=list)
    """Each call of the last turn with what came back (an ``output`` or an ``error``)."""
    feedback: bool = False
    """The verifier's findings came after the last model turn."""
    rounds: int = 0
    """Verifier findings so far."""
    warned: bool = False
    """The runtime told the agent it is going round in circles."""
    too_large: bool = False
    """A write was refused for its size."""
    plan_set: bool = False
    """A plan with items was set."""


def read(history: Sequence[Content]) -> Transcript:
    """Read a conversation, in order."""
    facts = Transcript()
    # Each function response answers the call at the same position in the model's turn.
    calls: list[FunctionCall] = []
    for content in history:
        if content["role"] == "model":
            facts.turns += 1
            facts.last_errors = []
            facts.last_results = []
            facts.feedback = False
            calls = list(calls_of(content))
            continue
        for part in content.get("parts") or ():
            text = part.get("text")
            if text and text.startswith(FEEDBACK_OPENING):
                facts.feedback = True
                facts.rounds += 1
            if text and LOOP_HINT in text:
                facts.warned = True
            response = part.get("function_response")
            if response:
                _answered(facts, calls.pop(0) if calls else None, response["response"])
    return facts


def _answered(facts: Transcript, call: FunctionCall | None, body: dict[str, Any]) -> None:
    name = call.args.get("name") if call is not None else None
    if call is not None:
        facts.last_results.append((call, body))
    if "error" in body:
        error = body["error"]
        facts.errors += 1
        facts.last_errors.append(error)
        facts.too_large = facts.too_large or error.get("kind") == "too_large"
        if "current_version" in error and isinstance(name, str):
            facts.versions[name] = error["current_version"]
        return
    out = body.get("output", {})
    if call is not None and call.name == "plan_manage":
        facts.plan_set = facts.plan_set or bool(out.get("items"))
    if call is None or call.name != "manage_artifact" or not isinstance(name, str):
        return
    if "version" in out:
        facts.versions[name] = out["version"]
    if call.args.get("action") in _WRITES:
        facts.writes[name] = facts.writes.get(name, 0) + 1
