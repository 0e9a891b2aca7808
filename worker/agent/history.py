"""Rebuild a session's conversation from its event log."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from worker.agent.events import Ended, Event, ToolFailure, ToolResult
from worker.models.base import Content

#: What :func:`elide_long_args` leaves in place of an argument it does not keep.
_ELIDED = re.compile(r"^\[[0-9,]+ characters not kept: over [0-9,]+\]$")


def rebuild(events: Iterable[Event]) -> list[Content]:
    """Turn a session's events, in log order, into the model's contents.

    Model contents are taken verbatim (thought signatures intact). Function responses of
    one turn, and any user text that follows them, merge into one ``user`` content, as
    the Gemini API expects.
    """
    return list(extend((), events))


def extend(contents: Sequence[Content], events: Iterable[Event]) -> tuple[Content, ...]:
    """``contents`` (rebuilt from the log's first events) followed by the next ``events``.

    ``extend(rebuild(a), b)`` equals ``rebuild([*a, *b])``: the last content may be replaced
    by one that merges it with what follows, never changed in place.
    """
    out = list(contents)
    for event in events:
        if isinstance(event, ToolResult | ToolFailure):
            body = (
                {"output": event.output}
                if isinstance(event, ToolResult)
                else {"error": event.error}
            )
            response: dict[str, Any] = {"name": event.name, "response": body}
            if event.call_id:
                response["id"] = event.call_id
            entry: Content = {"role": "user", "parts": [{"function_response": response}]}
        elif isinstance(event, Ended):
            continue
        else:
            entry = event.content
        if out and out[-1]["role"] == entry["role"] == "user":
            out[-1] = {"role": "user", "parts": [*out[-1]["parts"], *entry["parts"]]}
        else:
            out.append(entry)
    return tuple(out)


def elide_long_args(content: Content, *, max_chars: int) -> Content:
    """The model content as it is stored: string arguments over ``max_chars`` replaced by a note.

    A call that far over the artifact ceiling was refused anyway; kept whole, it would be
    copied into the database and sent back with every later turn. Everything else, thought
    signatures included, is kept as the model sent it.
    """
    parts = content.get("parts") or []
    if not any(_long_args(p, max_chars) for p in parts):
        return content
    kept = []
    for part in parts:
        if _long_args(part, max_chars):
            call = part["function_call"]
            args = {
                name: f"[{len(value):,} characters not kept: over {max_chars:,}]"
                if isinstance(value, str) and len(value) > max_chars
                else value
                for name, value in call["args"].items()
            }
            part = {**part, "function_call": {**call, "args": args}}
        kept.append(part)
    return {**content, "parts": kept}


def _long_args(part: dict[str, Any], max_chars: int) -> bool:
    args = (part.get("function_call") or {}).get("args") or {}
    return any(isinstance(v, str) and len(v) > max_chars for v in args.values())


def is_elided(args: dict[str, Any]) -> bool:
    """True when :func:`elide_long_args` replaced one of these call arguments by its note."""
    return any(isinstance(v, str) and _ELIDED.match(v) for v in args.values())
