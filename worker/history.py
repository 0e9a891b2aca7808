"""Rebuild a session's conversation from its event log."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from worker.model import Content

#: Event kinds that carry a function response.
TOOL_KINDS = ("tool_result", "tool_error")


def rebuild(events: Iterable[tuple[str, dict[str, Any]]]) -> list[Content]:
    """Turn ``(kind, payload)`` events, in log order, into the model's contents.

    Model contents are taken verbatim (thought signatures intact). Function responses of
    one turn, and any user text that follows them, merge into one ``user`` content, as
    the Gemini API expects.
    """
    contents: list[Content] = []
    for kind, payload in events:
        if kind in TOOL_KINDS:
            response = {"name": payload["name"], "response": payload["response"]}
            if payload.get("call_id"):
                response["id"] = payload["call_id"]
            entry: Content = {"role": "user", "parts": [{"function_response": response}]}
        elif "content" in payload:
            entry = payload["content"]
        else:
            continue
        if contents and contents[-1]["role"] == entry["role"] == "user":
            contents[-1] = {"role": "user",
                            "parts": [*contents[-1]["parts"], *entry["parts"]]}
        else:
            contents.append(entry)
    return contents
