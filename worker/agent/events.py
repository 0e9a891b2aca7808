"""The event log's vocabulary: one kind per event, and a typed payload per kind.

A session's events are its conversation and its history: the brief, each model output,
each tool result or failure, the runtime's nudges, the verifier's feedback and the ending.
Payloads are stored as JSON exactly as :meth:`to_payload` writes them; :func:`decode`
reads them back. No other module names a kind by its string.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar

from worker.models.base import Content

__all__ = [
    "Brief",
    "Ended",
    "Event",
    "EventKind",
    "Feedback",
    "ModelOutput",
    "Nudge",
    "NudgeReason",
    "ToolFailure",
    "ToolResult",
    "decode",
]


class EventKind(str, Enum):
    """What an event records."""

    #: the session's assignment, its first user message
    brief = "brief"
    #: the model's output, stored verbatim
    model = "model"
    #: a tool call that succeeded, with its output
    tool_result = "tool_result"
    #: a tool call the model got wrong, with the structured error it was shown
    tool_error = "tool_error"
    #: a notice of the runtime to the agent (no tool called, a loop warning)
    nudge = "nudge"
    #: the verifier's findings, sent back for a repair round
    feedback = "feedback"
    #: the session ended in this turn
    ended = "ended"


class NudgeReason(str, Enum):
    """Why the runtime nudged the agent."""

    #: the model answered without calling a tool
    no_tool_call = "no_tool_call"
    #: the loop detector's first warning
    loop = "loop"
    #: the operator's note to a fork, read as it goes live
    note = "note"


@dataclass(frozen=True)
class Brief:
    """The session's assignment."""

    kind: ClassVar[EventKind] = EventKind.brief
    content: Content

    def to_payload(self) -> dict[str, Any]:
        """The JSON stored in the log."""
        return {"content": self.content}


@dataclass(frozen=True)
class ModelOutput:
    """One model answer, exactly as the provider returned it (long arguments elided)."""

    kind: ClassVar[EventKind] = EventKind.model
    content: Content
    finish_reason: str = "STOP"

    def to_payload(self) -> dict[str, Any]:
        """The JSON stored in the log."""
        return {"content": self.content, "finish_reason": self.finish_reason}


@dataclass(frozen=True)
class ToolResult:
    """A tool call that succeeded: what the model was shown, and whether it made progress."""

    kind: ClassVar[EventKind] = EventKind.tool_result
    name: str
    call_id: str | None
    output: dict[str, Any]
    progress: bool = False
    """The call created or edited an artifact, or handed it off."""

    def to_payload(self) -> dict[str, Any]:
        """The JSON stored in the log."""
        return {
            "name": self.name,
            "call_id": self.call_id,
            "response": {"output": self.output},
            "progress": self.progress,
        }


@dataclass(frozen=True)
class ToolFailure:
    """A tool call the model got wrong, and the structured error it was shown."""

    kind: ClassVar[EventKind] = EventKind.tool_error
    name: str
    call_id: str | None
    error_kind: str
    error: dict[str, Any]

    def to_payload(self) -> dict[str, Any]:
        """The JSON stored in the log."""
        return {
            "name": self.name,
            "call_id": self.call_id,
            "kind": self.error_kind,
            "response": {"error": self.error},
        }


@dataclass(frozen=True)
class Nudge:
    """A notice of the runtime to the agent."""

    kind: ClassVar[EventKind] = EventKind.nudge
    reason: NudgeReason
    content: Content
    loop_kind: str | None = None
    """For a loop warning: which loop (repeat, errors, no_progress)."""

    def to_payload(self) -> dict[str, Any]:
        """The JSON stored in the log."""
        payload: dict[str, Any] = {"reason": self.reason.value, "content": self.content}
        if self.loop_kind is not None:
            payload["kind"] = self.loop_kind
        return payload


@dataclass(frozen=True)
class Feedback:
    """The verifier's findings on repair round ``round``."""

    kind: ClassVar[EventKind] = EventKind.feedback
    content: Content
    round: int

    def to_payload(self) -> dict[str, Any]:
        """The JSON stored in the log."""
        return {"content": self.content, "round": self.round}


@dataclass(frozen=True)
class Ended:
    """The session ended: its status, outcome and why."""

    kind: ClassVar[EventKind] = EventKind.ended
    status: str
    outcome: str
    error: str | None = None

    def to_payload(self) -> dict[str, Any]:
        """The JSON stored in the log."""
        return {"status": self.status, "outcome": self.outcome, "error": self.error}


#: Any event of the log.
Event = Brief | ModelOutput | ToolResult | ToolFailure | Nudge | Feedback | Ended


def decode(kind: str, payload: dict[str, Any]) -> Event:
    """The typed event of one stored ``(kind, payload)`` row.

    Raises:
        ValueError: an unknown kind.
    """
    match EventKind(kind):
        case EventKind.brief:
            return Brief(payload["content"])
        case EventKind.model:
            return ModelOutput(payload["content"], payload.get("finish_reason", "STOP"))
        case EventKind.tool_result:
            return ToolResult(
                payload["name"],
                payload.get("call_id"),
                payload["response"]["output"],
                bool(payload.get("progress")),
            )
        case EventKind.tool_error:
            return ToolFailure(
                payload["name"],
                payload.get("call_id"),
                payload["kind"],
                payload["response"]["error"],
            )
        case EventKind.nudge:
            return Nudge(NudgeReason(payload["reason"]), payload["content"], payload.get("kind"))
        case EventKind.feedback:
            return Feedback(payload["content"], payload["round"])
        case EventKind.ended:
            return Ended(payload["status"], payload["outcome"], payload.get("error"))
