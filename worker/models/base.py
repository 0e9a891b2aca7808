"""The model seam: ``generate(request) -> ModelTurn``, whatever the provider.

Conversation content is kept in the JSON shape of ``google.genai.types.Content``
(``{"role": ..., "parts": [...]}`` with snake_case keys) and stored verbatim, so a turn
can be rebuilt on any worker and replayed offline.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

#: A conversation entry, shaped like ``google.genai.types.Content`` dumped to JSON.
Content = dict[str, Any]


@dataclass(frozen=True)
class ToolSpec:
    """A function the model may call: name, description and a generated JSON schema."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class FunctionCall:
    """One function call the model asked for."""

    name: str
    args: dict[str, Any]
    id: str | None = None


@dataclass(frozen=True)
class TokenUsage:
    """Tokens of one model call, as the provider reports them."""

    prompt_tokens: int = 0
    """Input tokens, cached ones included."""
    cached_tokens: int = 0
    """Input tokens served from the provider's cache."""
    output_tokens: int = 0
    """Candidate tokens, thinking excluded."""
    thoughts_tokens: int = 0
    """Thinking tokens (billed as output)."""
    tool_use_tokens: int = 0
    """Tokens of tool-use prompts (billed as input)."""

    @property
    def total(self) -> int:
        """Every token billed for this call."""
        return self.prompt_tokens + self.output_tokens + self.thoughts_tokens + self.tool_use_tokens


@dataclass(frozen=True)
class ModelRequest:
    """What one turn sends: a prefix shared by the whole run, then the session's history."""

    model: str
    system_instruction: str
    tools: tuple[ToolSpec, ...]
    history: tuple[Content, ...]
    tool_mode: str = "AUTO"
    """Function-calling mode: AUTO, ANY or NONE."""
    cached_content: str | None = None
    """An explicit cache holding the system instruction and tools, which the request then
    leaves out."""
    max_output_tokens: int | None = None
    """Most output tokens, thinking included, the call may produce (None: the model's own
    limit)."""
    may_resend: Callable[[], bool] | None = None
    """Asked before a provider sends the request a second time within one turn (it asks
    again after a malformed function call): False keeps the first answer. The turn loop
    reserves the second call's cost against the run's budget here."""


@dataclass(frozen=True)
class ModelTurn:
    """The model's answer, with its content exactly as the provider returned it."""

    content: Content
    calls: tuple[FunctionCall, ...]
    text: str
    usage: TokenUsage
    finish_reason: str = "STOP"


class Model(Protocol):
    """A provider of model turns."""

    def generate(self, request: ModelRequest) -> ModelTurn:
        """Produce the next turn.

        Raises:
            RateLimited: the provider asked us to slow down.
            ModelUnavailable: a transient failure; the caller retries with backoff.
            ModelFatal: the request can never succeed.
        """
        ...


def calls_of(content: Content) -> tuple[FunctionCall, ...]:
    """The function calls inside a model ``Content``, in order."""
    found = []
    for part in content.get("parts") or ():
        call = part.get("function_call")
        if call:
            found.append(FunctionCall(call["name"], dict(call.get("args") or {}), call.get("id")))
    return tuple(found)


#: Characters per token below any Gemini tokenizer's average on prose, code or JSON (about
#: four on English, three and a half on code): a prompt has at most its characters divided
#: by this many tokens.
CHARS_PER_TOKEN_FLOOR = 3


def prompt_tokens_bound(request: ModelRequest) -> int:
    """The most tokens ``request``'s prompt can count: prefix, tools and history."""
    chars = (
        len(request.system_instruction)
        + sum(len(t.name) + len(t.description) + _chars(t.parameters) for t in request.tools)
        + sum(_chars(c) for c in request.history)
    )
    return math.ceil(chars / CHARS_PER_TOKEN_FLOOR)


def _chars(value: Any) -> int:
    """About the length of ``value`` as JSON, without serialising it: a history's text is
    a few long strings in a few dozen nodes, so a walk costs a tenth of ``json.dumps``."""
    if isinstance(value, str):
        return len(value) + 2
    if isinstance(value, dict):
        return 2 + sum(len(k) + 4 + _chars(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return 2 + sum(_chars(v) + 2 for v in value)
    return 8
