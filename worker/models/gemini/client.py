"""The ``gemini`` provider: the Gemini API through the ``google-genai`` SDK.

The SDK's own retries are off and every failure is classified (:mod:`.failures`: rate limit
with the server's retry delay and quota kind, transient, fatal, a cache gone); the turn loop
owns the policy.
Function calling is manual: the model's ``Content`` goes back into the history exactly as
it came, thought signatures included.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from google import genai
from google.genai import types

from worker.errors import (
    CacheNotFound,
    LimiterUnavailable,
    ModelFatal,
    ModelPaused,
    RateLimited,
    SwarmError,
)
from worker.models.base import ModelRequest, ModelTurn, TokenUsage, ToolSpec, calls_of
from worker.models.gemini.failures import classified, classify
from worker.models.limiter.base import Limiter, Outcome, Permit

if TYPE_CHECKING:
    from worker.models.gemini.cache import RunCache

logger = logging.getLogger(__name__)

#: The finish reason of a function call the model failed to write as valid JSON.
MALFORMED = "MALFORMED_FUNCTION_CALL"
#: What stands in the history for a turn whose function call came out malformed twice.
MALFORMED_TEXT = "[the function call was malformed]"
#: Per-day quotas reset at midnight in this zone.
QUOTA_ZONE = ZoneInfo("America/Los_Angeles")
#: Fleet-wide cool-down after a 429 that names no quota and gives no delay.
UNEXPLAINED_COOLDOWN_S = 30.0
#: Window in which unexplained 429s are counted across the fleet.
UNEXPLAINED_WINDOW_S = 600.0
#: Unexplained 429s within the window that pause the model: a spent daily quota arrives
#: this way as often as with a per-day ``QuotaFailure``.
UNEXPLAINED_LIMIT = 3


def make_client(*, api_key: str, base_url: str | None, timeout_s: float) -> genai.Client:
    """A client for the Gemini Developer API with its version pinned and its retries off."""
    return genai.Client(
        api_key=api_key,
        vertexai=False,
        http_options=types.HttpOptions(
            base_url=base_url,
            api_version="v1beta",
            timeout=int(timeout_s * 1000),
            retry_options=types.HttpRetryOptions(attempts=1),
        ),
    )


def thinking_for(model: str, *, level: str, budget: int) -> types.ThinkingConfig:
    """Gemini 3 takes a thinking level, 2.5 a token budget; never both."""
    if model.startswith("gemini-2"):
        return types.ThinkingConfig(thinking_budget=budget)
    return types.ThinkingConfig(thinking_level=types.ThinkingLevel(level.upper()))


class GeminiModel:
    """Model turns from the Gemini API.

    Args:
        client: The process's shared client.
        limiter: The fleet-wide limiter consulted before every call.
        thinking_level: Thinking level of Gemini 3 models.
        thinking_budget: Thinking budget of Gemini 2.5 models.
        wait_s: How long to wait for the limiter before handing the turn back.
        cache: The run's explicit context cache, if it has one: requests then name it and
            leave the prefix out.
        cooldown_s: The fleet's cool-down after a 429 that names no quota and no delay.
    """

    def __init__(
        self,
        *,
        client: genai.Client,
        limiter: Limiter,
        thinking_level: str = "low",
        thinking_budget: int = 1024,
        wait_s: float = 10.0,
        cache: RunCache | None = None,
        cooldown_s: float = UNEXPLAINED_COOLDOWN_S,
    ) -> None:
        self.client = client
        self.limiter = limiter
        self.thinking_level = thinking_level
        self.thinking_budget = thinking_budget
        self.wait_s = wait_s
        self.cache = cache
        self.cooldown_s = cooldown_s

    def generate(self, request: ModelRequest) -> ModelTurn:
        """Call the model; a malformed function call is asked for once more.

        Raises:
            RateLimited: 429, or 503 RESOURCE_EXHAUSTED; ``quota="day"`` has paused the
                model for the whole fleet.
            ModelUnavailable: other 5xx, a timeout, a refused or broken connection.
            ModelFatal: the API refused the request (4xx).
            ModelPaused: a per-day quota is spent, or unexplained 429s keep coming: the
                model is paused for the whole fleet.
        """
        if self.cache is not None:
            request = replace(request, cached_content=self.cache.name_for(request))
        turn = self._call_cached(request)
        if turn.finish_reason == MALFORMED and (request.may_resend is None or request.may_resend()):
            logger.info("%s: malformed function call; asking again", request.model)
            again = self._call_cached(request)
            turn = ModelTurn(
                content=again.content,
                calls=again.calls,
                text=again.text,
                finish_reason=again.finish_reason,
                usage=_add(turn.usage, again.usage),
            )
        return turn

    def config(self, request: ModelRequest) -> types.GenerateContentConfig:
        """The request's configuration: tools, tool mode, thinking and the output limit."""
        if request.cached_content:
            # The cache holds system instruction, tools and tool config; the API refuses
            # a request that repeats them.
            return types.GenerateContentConfig(
                cached_content=request.cached_content,
                max_output_tokens=request.max_output_tokens,
                automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
                automatic_continuation=False,
                thinking_config=thinking_for(
                    request.model, level=self.thinking_level, budget=self.thinking_budget
                ),
            )
        return types.GenerateContentConfig(
            system_instruction=request.system_instruction,
            tools=[*declarations(request.tools)],
            tool_config=tool_config(request.tool_mode),
            max_output_tokens=request.max_output_tokens,
            automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
            automatic_continuation=False,
            thinking_config=thinking_for(
                request.model, level=self.thinking_level, budget=self.thinking_budget
            ),
        )

    def _call_cached(self, request: ModelRequest) -> ModelTurn:
        """Call; an explicit cache that expired or was evicted is made again, once."""
        try:
            return self._call(request)
        except CacheNotFound:
            if self.cache is None or request.cached_content is None:
                raise
            gone = request.cached_content
            logger.warning("%s: cache %s is gone; caching the prefix again", request.model, gone)
            self.cache.forget(gone)
            return self._call(replace(request, cached_content=self.cache.name_for(request)))

    def _call(self, request: ModelRequest) -> ModelTurn:
        contents = [types.Content.model_validate(c) for c in request.history]
        estimate = estimate_tokens(request)
        permit = self.limiter.acquire(request.model, tokens=estimate, wait_s=self.wait_s)
        try:
            response = self.client.models.generate_content(
                model=request.model, contents=contents, config=self.config(request)
            )
            turn = to_turn(response)
        except Exception as exc:
            error = classify(exc)
            if error is None:
                self._release(permit, tokens_used=0, outcome=Outcome.failed)
                raise
            raise self._after_failure(request.model, permit, error) from exc
        self._release(permit, tokens_used=turn.usage.total, outcome=Outcome.ok)
        return turn

    def _release(
        self,
        permit: Permit,
        *,
        tokens_used: int,
        outcome: Outcome,
        retry_delay_s: float | None = None,
    ) -> None:
        # The call is made and paid for: a limiter that cannot record it must not turn a
        # good answer into a retry. The slot frees itself when the permit expires.
        try:
            self.limiter.release(
                permit, tokens_used=tokens_used, outcome=outcome, retry_delay_s=retry_delay_s
            )
        except LimiterUnavailable:
            logger.warning("could not release a permit for %s", permit.model, exc_info=True)

    def _after_failure(self, model: str, permit: Permit, error: SwarmError) -> SwarmError:
        """Tell the limiter how the call failed; returns the error to raise.

        Raises:
            ModelPaused: the model is now paused fleet-wide.
        """
        if not isinstance(error, RateLimited):
            self._release(permit, tokens_used=0, outcome=Outcome.failed)
            return error
        if error.quota == "day":
            self._pause(model, error)
            self._release(
                permit, tokens_used=0, outcome=Outcome.rate_limited, retry_delay_s=error.delay_s
            )
            raise self._paused(model, error) from error
        if error.quota == "unknown" and error.delay_s is None:
            # Nothing says which limit was hit or for how long: the fleet cools down
            # rather than every session retrying at once.
            error = RateLimited(str(error), delay_s=self.cooldown_s, quota="unknown")
        self._release(
            permit, tokens_used=0, outcome=Outcome.rate_limited, retry_delay_s=error.delay_s
        )
        if error.quota == "unknown" and self._strikes(model) >= UNEXPLAINED_LIMIT:
            error = RateLimited(
                f"{error} (unexplained 429s keep coming: taken as a spent daily quota)",
                delay_s=error.delay_s,
                quota="day",
            )
        if error.quota == "day":
            self._pause(model, error)
            raise self._paused(model, error) from error
        return error

    def _pause(self, model: str, error: RateLimited) -> None:
        """Pause ``model`` fleet-wide until its daily quota resets.

        The first thing said after the refusal: every permit asked for after it, in this
        process or another, is refused; only calls already under way still go out.
        """
        until = self._quota_reset()
        try:
            self.limiter.pause(model, until=until, reason=str(error))
        except LimiterUnavailable:
            logger.warning("could not pause %s fleet-wide", model, exc_info=True)
        logger.warning("%s paused fleet-wide until %s: %s", model, until.isoformat(), error)

    def _paused(self, model: str, error: RateLimited) -> ModelPaused:
        # Sessions stop rather than retry until the quota resets.
        return ModelPaused(model=model, until=self._quota_reset(), reason=str(error))

    @staticmethod
    def _quota_reset() -> datetime:
        # Reset at midnight Pacific, kept in UTC like every time of the program.
        return quota_reset(datetime.now(QUOTA_ZONE)).astimezone(UTC)

    def _strikes(self, model: str) -> int:
        try:
            return self.limiter.strike(model, window_s=UNEXPLAINED_WINDOW_S)
        except LimiterUnavailable:
            logger.warning("could not count a 429 of %s fleet-wide", model, exc_info=True)
            return 0


def declarations(tools: tuple[ToolSpec, ...]) -> list[types.Tool]:
    """The tools as the API declares them, schemas taken as generated."""
    return [
        types.Tool(
            function_declarations=[
                types.FunctionDeclaration(
                    name=t.name, description=t.description, parameters_json_schema=t.parameters
                )
                for t in tools
            ]
        )
    ]


def tool_config(mode: str) -> types.ToolConfig:
    """The function-calling mode (AUTO, ANY, NONE)."""
    return types.ToolConfig(
        function_calling_config=types.FunctionCallingConfig(
            mode=types.FunctionCallingConfigMode(mode)
        )
    )


@dataclass(frozen=True)
class CachedPrefix:
    """An explicit cache the API created: its name, size and end of life."""

    name: str
    tokens: int
    expires_at: datetime | None
    created_at: datetime | None = None
    """When the API says it made it (its clock, which may not be ours)."""

    @property
    def lifetime_s(self) -> float | None:
        """How long the API keeps it, by the API's own clock; None when it does not say."""
        if self.expires_at is None or self.created_at is None:
            return None
        return (self.expires_at - self.created_at).total_seconds()


def create_cache(
    client: genai.Client,
    *,
    model: str,
    system_instruction: str,
    tools: tuple[ToolSpec, ...],
    tool_mode: str,
    ttl_s: float,
    display_name: str,
) -> CachedPrefix:
    """Cache a run's stable prefix (system instruction, tools, tool config).

    Raises:
        ModelUnavailable: a transient failure (retried by the caller).
        ModelFatal: the API refused it (a prefix below the model's minimum, say).
    """
    with classified():
        cache = client.caches.create(
            model=model,
            config=types.CreateCachedContentConfig(
                system_instruction=system_instruction,
                tools=declarations(tools),
                tool_config=tool_config(tool_mode),
                ttl=f"{int(ttl_s)}s",
                display_name=display_name,
            ),
        )
    if not cache.name:
        raise ModelFatal("the API created a cache without a name")
    meta = cache.usage_metadata
    tokens = (meta.total_token_count or 0) if meta else 0
    return CachedPrefix(cache.name, tokens, cache.expire_time, cache.create_time)


def delete_cache(client: genai.Client, name: str) -> None:
    """Delete an explicit cache.

    Raises:
        SwarmError: the classified failure.
    """
    with classified():
        client.caches.delete(name=name)


def estimate_tokens(request: ModelRequest) -> int:
    """A rough input size for the limiter's token budget (four characters a token)."""
    size = len(request.system_instruction) + sum(
        len(json.dumps(t.parameters)) + len(t.description) for t in request.tools
    )
    return (size + sum(len(json.dumps(c)) for c in request.history)) // 4


def to_turn(response: types.GenerateContentResponse) -> ModelTurn:
    """The model's answer as a :class:`ModelTurn`, its content dumped verbatim."""
    candidate = response.candidates[0] if response.candidates else None
    if candidate is None:
        feedback = response.prompt_feedback
        reason = feedback.block_reason if feedback else None
        # A blocked prompt is billed: its usage goes with the refusal.
        raise ModelFatal(
            f"the API returned no candidate (block reason: {reason})",
            usage=usage_of(response.usage_metadata),
        )
    finish = candidate.finish_reason.value if candidate.finish_reason else "STOP"
    if candidate.content and candidate.content.parts:
        content = candidate.content.model_dump(mode="json", exclude_none=True)
        content["role"] = "model"
    else:
        content = {
            "role": "model",
            "parts": [
                {"text": MALFORMED_TEXT if finish == MALFORMED else f"[no content: {finish}]"}
            ],
        }
    usage = usage_of(response.usage_metadata)
    text = "".join(p.get("text", "") for p in content["parts"] if not p.get("thought"))
    return ModelTurn(
        content=content, calls=calls_of(content), text=text, usage=usage, finish_reason=finish
    )


def usage_of(meta: types.GenerateContentResponseUsageMetadata | None) -> TokenUsage:
    """The tokens of a call as the API counted them; absent counts are zero.

    ``toolUsePromptTokenCount`` is outside ``promptTokenCount`` and billed as input;
    ``cachedContentTokenCount`` is inside it.
    """
    if meta is None:
        return TokenUsage()
    return TokenUsage(
        prompt_tokens=meta.prompt_token_count or 0,
        cached_tokens=meta.cached_content_token_count or 0,
        output_tokens=meta.candidates_token_count or 0,
        thoughts_tokens=meta.thoughts_token_count or 0,
        tool_use_tokens=meta.tool_use_prompt_token_count or 0,
    )


def quota_reset(now: datetime) -> datetime:
    """When a per-day quota is back: the next midnight, Pacific time.

    The API's retry delay on a per-day 429 is seconds, not the hours until the reset, so it
    is not what decides when the model may be called again.
    """
    return (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)


def _add(a: TokenUsage, b: TokenUsage) -> TokenUsage:
    return TokenUsage(
        prompt_tokens=a.prompt_tokens + b.prompt_tokens,
        cached_tokens=a.cached_tokens + b.cached_tokens,
        output_tokens=a.output_tokens + b.output_tokens,
        thoughts_tokens=a.thoughts_tokens + b.thoughts_tokens,
        tool_use_tokens=a.tool_use_tokens + b.tool_use_tokens,
    )
