"""The ``generateContent`` wire format: requests in, responses out.

Requests are parsed with the SDK's own types, which accept camelCase and snake_case keys
alike (the SDK itself sends a mix of both) and decode thought signatures from either
base64 alphabet; responses are dumped with the API's camelCase aliases.
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from dataclasses import dataclass
from typing import Any

from google.genai import types
from pydantic import ValidationError

from worker.models.base import Content, ModelRequest, TokenUsage, ToolSpec

#: Characters per token when the fake counts tokens.
CHARS_PER_TOKEN = 4
_TITLE = re.compile(r'dashboard card "([^"]+)"')


class BadRequest(ValueError):
    """The request body is not a valid ``generateContent`` request (HTTP 400)."""


@dataclass(frozen=True)
class Parsed:
    """A ``generateContent`` request, as the sim personas read it."""

    request: ModelRequest
    contents: tuple[types.Content, ...]
    brief: str
    """Text of the first user message: it identifies the session."""
    title: str


def _get(body: dict[str, Any], camel: str) -> Any:
    snake = re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), camel)
    return body.get(camel, body.get(snake))


def parse(model: str, body: Any) -> Parsed:
    """Read a request body.

    Raises:
        BadRequest: not a valid request.
    """
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    try:
        contents = tuple(types.Content.model_validate(c) for c in _get(body, "contents") or ())
        system = _get(body, "systemInstruction")
        system_text = (
            "".join(p.text or "" for p in types.Content.model_validate(system).parts or ())
            if system
            else ""
        )
        tools = [types.Tool.model_validate(t) for t in _get(body, "tools") or ()]
        config = _get(body, "toolConfig")
        tool_config = types.ToolConfig.model_validate(config) if config else None
        generation = _get(body, "generationConfig") or {}
        max_output = _get(generation, "maxOutputTokens") if isinstance(generation, dict) else None
    except (ValidationError, TypeError, AttributeError) as exc:
        raise BadRequest(f"invalid request: {exc}") from exc
    if not contents:
        raise BadRequest("contents must not be empty")
    specs = tuple(
        ToolSpec(d.name or "", d.description or "", dict(d.parameters_json_schema or {}))
        for tool in tools
        for d in tool.function_declarations or ()
    )
    mode = "AUTO"
    if (
        tool_config
        and tool_config.function_calling_config
        and tool_config.function_calling_config.mode
    ):
        mode = str(tool_config.function_calling_config.mode.value)
    history = tuple(c.model_dump(mode="json", exclude_none=True) for c in contents)
    brief = next(
        (p.text for c in contents if c.role == "user" for p in c.parts or () if p.text), ""
    )
    found = _TITLE.search(brief)
    return Parsed(
        request=ModelRequest(
            model=model,
            system_instruction=system_text,
            tools=specs,
            history=history,
            tool_mode=mode,
            max_output_tokens=int(max_output) if max_output is not None else None,
        ),
        contents=contents,
        brief=brief,
        title=found.group(1) if found else "Live Telemetry",
    )


def current_turn_calls(contents: tuple[types.Content, ...]) -> list[types.Part]:
    """The first function-call part of each model content since the last user text.

    That span is the API's "current turn": each of those parts must carry the thought
    signature the model returned with it.
    """
    start = 0
    for i, content in enumerate(contents):
        if content.role == "user" and any(p.text for p in content.parts or ()):
            start = i + 1
    firsts = []
    for content in contents[start:]:
        if content.role != "model":
            continue
        calls = [p for p in content.parts or () if p.function_call]
        if calls:
            firsts.append(calls[0])
    return firsts


def prefix_hashes(parsed: Parsed) -> list[tuple[str, int]]:
    """Rolling hashes of the request's growing prefixes, each with its size in tokens.

    Entry 0 covers the system instruction and tools; entry ``i`` adds contents up to
    ``i``. A provider caches implicitly what an earlier request already sent.
    """
    req = parsed.request
    digest = hashlib.sha256(req.model.encode())
    stable = req.system_instruction + "".join(
        t.name + t.description + repr(sorted(t.parameters.items())) for t in req.tools
    )
    digest.update(stable.encode())
    size = len(stable)
    out = [(digest.hexdigest(), size // CHARS_PER_TOKEN)]
    for content in parsed.contents:
        text = content.model_dump_json(exclude_none=True)
        digest.update(text.encode())
        size += len(text)
        out.append((digest.hexdigest(), size // CHARS_PER_TOKEN))
    return out


def response_body(
    content: Content | None,
    *,
    finish_reason: str,
    usage: TokenUsage,
    model: str,
    finish_message: str | None = None,
) -> dict[str, Any]:
    """A ``GenerateContentResponse`` in the API's JSON shape.

    As the API does, a candidate without content has no ``content`` key, counts absent
    from ``usageMetadata`` are left out, and prompt and cache counts come per modality.
    """
    candidate = types.Candidate(
        content=types.Content.model_validate(content) if content is not None else None,
        finish_reason=types.FinishReason(finish_reason),
        finish_message=finish_message,
        index=0,
    )
    meta = types.GenerateContentResponseUsageMetadata(
        prompt_token_count=usage.prompt_tokens,
        cached_content_token_count=usage.cached_tokens or None,
        candidates_token_count=usage.output_tokens or None,
        thoughts_token_count=usage.thoughts_tokens or None,
        tool_use_prompt_token_count=usage.tool_use_tokens or None,
        total_token_count=usage.total,
        prompt_tokens_details=[
            types.ModalityTokenCount(
                modality=types.MediaModality.TEXT, token_count=usage.prompt_tokens
            )
        ],
        cache_tokens_details=[
            types.ModalityTokenCount(
                modality=types.MediaModality.TEXT, token_count=usage.cached_tokens
            )
        ]
        if usage.cached_tokens
        else None,
    )
    response = types.GenerateContentResponse(
        candidates=[candidate],
        usage_metadata=meta,
        model_version=model,
        response_id=secrets.token_urlsafe(17)[:23],
    )
    body = response.model_dump(mode="json", by_alias=True, exclude_none=True)
    # The SDK writes bytes in the URL-safe alphabet; the API sends signatures in the standard
    # one, padded.
    for candidate in body["candidates"]:
        for part in candidate.get("content", {}).get("parts", ()):
            if "thoughtSignature" in part:
                raw = base64.urlsafe_b64decode(part["thoughtSignature"] + "==")
                part["thoughtSignature"] = base64.b64encode(raw).decode()
    return body


def error_body(
    code: int, status: str, message: str, details: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A ``google.rpc.Status`` error envelope, as the API sends it."""
    error: dict[str, Any] = {"code": code, "message": message, "status": status}
    if details:
        error["details"] = details
    return {"error": error}
