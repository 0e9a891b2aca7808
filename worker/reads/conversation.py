"""A session's recorded rows cut into turns: the body of :mod:`.transcript`.

A turn's events are its request (the brief, the verifier's findings, an operator's note:
what the session's side sent before the model answered), the model's output, one result
or error per call, and the nudges the runtime added after them. Its usage row says what
the call cost; the artifact versions it wrote are diffed against the version before; a
verdict follows the turn that handed off the version it judged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from worker.agent.events import (
    Brief,
    Ended,
    Event,
    Feedback,
    ModelOutput,
    Nudge,
    NudgeReason,
    ToolFailure,
    ToolResult,
    decode,
)
from worker.agent.history import is_elided
from worker.models.base import Content
from worker.reads.verdicts import Check, Verdict, read_verdict
from worker.reads.version_diffs import VersionDiff, version_diffs

__all__ = [
    "SHORT_ARG_CHARS",
    "Check",
    "Ending",
    "Message",
    "Recorded",
    "ToolCall",
    "Turn",
    "TurnUsage",
    "Verdict",
    "VersionDiff",
    "build_turns",
]

#: Characters of a long string argument that a transcript shows.
SHORT_ARG_CHARS = 120


@dataclass(frozen=True)
class Message:
    """What the session's side told the model: the brief, findings, a nudge or a note."""

    kind: str
    """``brief``, ``feedback`` or ``nudge``; ``unreadable`` for an event this version
    cannot decode (its payload as JSON, its kind as the reason)."""
    text: str
    reason: str | None = None
    """A nudge's reason (``loop: no_progress``), a feedback's repair round."""


@dataclass(frozen=True)
class TurnUsage:
    """What the turn's model call was sent and cost."""

    model: str
    prompt_tokens: int
    new_prompt_tokens: int
    """Prompt tokens the turn added to the turn before's prompt (all of them on turn 0)."""
    cached_tokens: int
    output_tokens: int
    thoughts_tokens: int
    tool_use_tokens: int
    cost_usd: float
    latency_ms: int


@dataclass(frozen=True)
class ToolCall:
    """One call of a model output, and what the model was shown for it."""

    name: str
    call_id: str | None
    args: dict[str, Any]
    elided: bool = False
    """An argument was too long to store; the log keeps a note of its size instead."""
    output: dict[str, Any] | None = None
    """The result, when the call succeeded."""
    error_kind: str | None = None
    error: dict[str, Any] | None = None
    """The structured error the model was shown (``message``, ``hint``, ...)."""

    def shortened(self, max_chars: int) -> tuple[dict[str, Any], dict[str, int]]:
        """The arguments with each string over ``max_chars`` cut to its start and an
        ellipsis; and the full length in characters of each argument so cut."""
        args: dict[str, Any] = {}
        sizes: dict[str, int] = {}
        for name, value in self.args.items():
            if isinstance(value, str) and len(value) > max_chars:
                args[name] = value[:max_chars].rstrip() + "\N{HORIZONTAL ELLIPSIS}"
                sizes[name] = len(value)
            else:
                args[name] = value
        return args, sizes

    @property
    def ok(self) -> bool | None:
        """True: it succeeded; False: it failed; None: no result was recorded."""
        if self.error is not None:
            return False
        return None if self.output is None else True


@dataclass(frozen=True)
class Ending:
    """The session ended in this turn: its status, outcome and why."""

    status: str
    outcome: str
    error: str | None


@dataclass(frozen=True)
class Turn:
    """One turn: request, model output, tool calls, versions, verdicts, nudges, ending."""

    number: int
    request: list[Message] = field(default_factory=list)
    results_sent: int = 0
    """Tool results of the turn before, sent back with this request."""
    usage: TurnUsage | None = None
    text: str = ""
    thoughts: list[str] = field(default_factory=list)
    """Summaries of the model's thoughts, where the provider returned them."""
    finish_reason: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    nudges: list[Message] = field(default_factory=list)
    versions: list[VersionDiff] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    ended: Ending | None = None


@dataclass(frozen=True)
class Recorded:
    """A session's rows, as read: ``(turn_no, kind, payload)`` events in log order, and
    usage, version and verdict rows as mappings of their columns."""

    events: list[tuple[int, str, dict[str, Any]]]
    usage: list[dict[str, Any]]
    versions: list[dict[str, Any]]
    verdicts: list[dict[str, Any]]


def build_turns(recorded: Recorded) -> list[Turn]:
    """The session's turns in order, each with everything recorded of it."""
    by_turn: dict[int, list[Event | Message]] = {}
    for turn_no, kind, payload in recorded.events:
        by_turn.setdefault(turn_no, []).append(_decode(kind, payload))
    used = {u["turn_no"]: u for u in recorded.usage}
    versions = version_diffs(recorded.versions)
    numbers = sorted(
        {n for n in by_turn if n >= 0} | set(used) | {v[0] for v in versions if v[0] >= 0}
    )
    turns: list[Turn] = []
    previous_prompt = 0
    previous_results = 0
    for number in numbers:
        row = used.get(number)
        turn = _turn(number, by_turn.get(number, []), row, previous_prompt, previous_results)
        turn.versions.extend(d for n, d in versions if n == number)
        turns.append(turn)
        if row is not None:
            previous_prompt = row["prompt_tokens"]
        previous_results = sum(1 for c in turn.tool_calls if c.ok is not None)
    _place_verdicts(turns, recorded)
    return turns


def _decode(kind: str, payload: dict[str, Any]) -> Event | Message:
    """The typed event; an event this version cannot read is shown as it was stored."""
    try:
        return decode(kind, payload)
    except (KeyError, TypeError, ValueError):
        return Message("unreadable", json.dumps(payload, ensure_ascii=False), kind)


def _turn(
    number: int,
    log: list[Event | Message],
    row: dict[str, Any] | None,
    previous_prompt: int,
    previous_results: int,
) -> Turn:
    request: list[Message] = []
    nudges: list[Message] = []
    calls: list[ToolCall] = []
    thoughts: list[str] = []
    text: list[str] = []
    finish_reason: str | None = None
    ended: Ending | None = None
    for event in log:
        if isinstance(event, ModelOutput):
            finish_reason = event.finish_reason
            for part in event.content.get("parts") or []:
                _part(part, calls, thoughts, text)
        elif isinstance(event, ToolResult | ToolFailure):
            _answer(calls, event)
        elif isinstance(event, Ended):
            ended = Ending(event.status, event.outcome, event.error)
        elif isinstance(event, Brief | Feedback | Nudge | Message):
            (request if finish_reason is None else nudges).append(_message(event))
    return Turn(
        number,
        request=request,
        results_sent=previous_results if number else 0,
        usage=None if row is None else _usage(row, previous_prompt if number else 0),
        text="".join(text),
        thoughts=thoughts,
        finish_reason=finish_reason,
        tool_calls=calls,
        nudges=nudges,
        ended=ended,
    )


def _usage(row: dict[str, Any], previous_prompt: int) -> TurnUsage:
    return TurnUsage(
        model=row["model"],
        prompt_tokens=row["prompt_tokens"],
        new_prompt_tokens=max(row["prompt_tokens"] - previous_prompt, 0),
        cached_tokens=row["cached_tokens"],
        output_tokens=row["output_tokens"],
        thoughts_tokens=row["thoughts_tokens"],
        tool_use_tokens=row["tool_use_tokens"],
        cost_usd=row["cost_usd"],
        latency_ms=row["latency_ms"],
    )


def _part(
    part: dict[str, Any], calls: list[ToolCall], thoughts: list[str], text: list[str]
) -> None:
    if "function_call" in part:
        call = part["function_call"] or {}
        args = dict(call.get("args") or {})
        calls.append(ToolCall(str(call.get("name")), call.get("id"), args, elided=is_elided(args)))
    elif part.get("thought") and part.get("text"):
        thoughts.append(str(part["text"]))
    elif part.get("text"):
        text.append(str(part["text"]))


def _answer(calls: list[ToolCall], event: ToolResult | ToolFailure) -> None:
    """Set a call's result: the call with its id, else the first of its name without one."""
    index = next(
        (i for i, c in enumerate(calls) if event.call_id and c.call_id == event.call_id),
        None,
    )
    if index is None:
        index = next(
            (i for i, c in enumerate(calls) if c.name == event.name and c.ok is None), None
        )
    if index is None:  # a result the output has no call for: shown on its own
        calls.append(ToolCall(event.name, event.call_id, {}))
        index = len(calls) - 1
    call = calls[index]
    if isinstance(event, ToolResult):
        calls[index] = replace(call, output=event.output)
    else:
        calls[index] = replace(call, error_kind=event.error_kind, error=event.error)


def _message(event: Brief | Feedback | Nudge | Message) -> Message:
    if isinstance(event, Message):
        return event
    if isinstance(event, Brief):
        return Message("brief", _text(event.content))
    if isinstance(event, Feedback):
        return Message("feedback", _text(event.content), f"repair round {event.round + 1}")
    reason = event.reason.value
    if event.reason is NudgeReason.loop and event.loop_kind:
        reason = f"{reason}: {event.loop_kind}"
    return Message("nudge", _text(event.content), reason)


def _text(content: Content) -> str:
    return "\n".join(str(p["text"]) for p in content.get("parts") or [] if p.get("text"))


def _place_verdicts(turns: list[Turn], recorded: Recorded) -> None:
    """Put each verdict after the turn that handed off what it judged.

    Handoffs are matched in order by artifact and version; a verdict with no matching
    handoff follows the turn that wrote the version, or the last turn.
    """
    judged = {v["id"]: (v["name"], v["version"], v["turn_no"]) for v in recorded.versions}
    handoffs = [
        (turn, (c.output or {}).get("artifact_name"), (c.output or {}).get("version"))
        for turn in turns
        for c in turn.tool_calls
        if (c.output or {}).get("status") == "handed_off"
    ]
    for row in recorded.verdicts:
        name, version, wrote = judged.get(row["artifact_version_id"], ("?", -1, -1))
        match = next((h for h in handoffs if h[1:] == (name, version)), None)
        if match is not None:
            handoffs.remove(match)
            turn: Turn | None = match[0]
        else:
            turn = next((t for t in turns if t.number == wrote), turns[-1] if turns else None)
        if turn is None:
            continue
        turn.verdicts.append(read_verdict(row, name=name, version=version))
