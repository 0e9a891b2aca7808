"""The Gemini provider through the real google-genai SDK, against the fake Gemini API."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import httpx2
import pytest
from google.genai import errors, types

from ops.fake_gemini import FakeGemini, Fault, FaultRule
from tests.factories import dashboard_brief, dashboard_prefix
from worker.errors import ModelFatal, ModelPaused, ModelUnavailable, RateLimited
from worker.models.base import ModelRequest
from worker.models.gemini.client import (
    GeminiModel,
    create_cache,
    delete_cache,
    make_client,
    thinking_for,
)
from worker.models.gemini.failures import classify, retry_delay_s
from worker.models.limiter.base import LimitConfig, LocalLimiter
from worker.states import Outcome

MODEL = "gemini-3-flash-preview"
CANARY = "canary-key-3f9c1e"


#: The fleet's cool-down after a 429 naming no quota, short enough for a test to wait out.
COOLDOWN_S = 0.3


def _model(fake: FakeGemini, *, timeout_s: float = 2.0) -> GeminiModel:
    client = make_client(api_key=CANARY, base_url=fake.url, timeout_s=timeout_s)
    return GeminiModel(
        client=client, limiter=LocalLimiter(LimitConfig()), wait_s=3.0, cooldown_s=COOLDOWN_S
    )


def _request(history: list[dict[str, Any]] | None = None, model: str = MODEL) -> ModelRequest:
    prefix = dashboard_prefix("candidate")
    return ModelRequest(
        model=model,
        system_instruction=prefix.system_instruction,
        tools=prefix.tools,
        history=tuple(history or [dashboard_brief(1, 0)]),
    )


def _respond(turn_content: dict[str, Any], version: int = 1) -> dict[str, Any]:
    parts = [
        {
            "function_response": {
                "id": p["function_call"].get("id"),
                "name": p["function_call"]["name"],
                "response": {
                    "output": {"items": [{"id": 1}], "version": version, "size_bytes": 100}
                },
            }
        }
        for p in turn_content["parts"]
        if "function_call" in p
    ]
    return {"role": "user", "parts": parts}


def test_turns_round_trip_with_signatures_and_cached_usage(
    fake_gemini: Callable[..., FakeGemini],
) -> None:
    # Given the fake API and a session's brief
    fake = fake_gemini()
    model = _model(fake)
    history = [dashboard_brief(1, 0)]
    # When three turns are taken, each model content appended verbatim as JSON
    turns = []
    for _ in range(3):
        turn = model.generate(_request(history))
        turns.append(turn)
        history += [turn.content, _respond(turn.content)]
    # Then every call was accepted (the fake refuses a lost thought signature)
    assert [s.status for s in fake.served] == [200, 200, 200]
    first_parts = [t.content["parts"][0] for t in turns]
    assert all(p.get("thought_signature") for p in first_parts)
    assert all(t.calls for t in turns)
    # and the repeated prefix came back as cached input
    assert turns[0].usage.cached_tokens == 0
    assert 0 < turns[1].usage.cached_tokens < turns[1].usage.prompt_tokens
    assert turns[2].usage.output_tokens > 0 and turns[2].usage.thoughts_tokens > 0


def test_a_lost_signature_is_a_fatal_error(fake_gemini: Callable[..., FakeGemini]) -> None:
    # Given a history whose model content lost its thought signature
    fake = fake_gemini()
    model = _model(fake)
    history = [dashboard_brief(1, 0)]
    turn = model.generate(_request(history))
    content = {
        "role": "model",
        "parts": [
            {k: v for k, v in p.items() if k != "thought_signature"} for p in turn.content["parts"]
        ],
    }
    # When it is sent back, Then the API's 400 is classified fatal
    with pytest.raises(ModelFatal, match="thought_signature"):
        model.generate(_request([*history, content, _respond(content)]))


@pytest.mark.parametrize(
    ("fault", "error", "delay_s"),
    [
        (Fault.rate_minute, RateLimited, 2.0),
        (Fault.rate_help, RateLimited, COOLDOWN_S),
        (Fault.exhausted, RateLimited, COOLDOWN_S),
        (Fault.internal, ModelUnavailable, None),
        (Fault.unavailable, ModelUnavailable, None),
        (Fault.truncate, ModelUnavailable, None),
        (Fault.hang, ModelUnavailable, None),
    ],
)
def test_faults_are_classified(
    fake_gemini: Callable[..., FakeGemini],
    fault: Fault,
    error: type[Exception],
    delay_s: float | None,
) -> None:
    # Given the API fails the next request with ``fault``
    fake = fake_gemini(faults=[FaultRule(fault)])
    model = _model(fake, timeout_s=1.0)
    # When a turn is asked for
    with pytest.raises(error) as raised:
        model.generate(_request())
    # Then the error carries the server's retry delay, and never the key
    assert type(raised.value) is error
    assert getattr(raised.value, "delay_s", None) == delay_s
    assert CANARY not in str(raised.value)
    assert fake.faults.fired == {fault.value: 1}
    # and the next request goes through
    assert model.generate(_request()).calls


def test_a_refused_connection_is_transient() -> None:
    client = make_client(api_key=CANARY, base_url="http://127.0.0.1:9", timeout_s=1.0)
    model = GeminiModel(client=client, limiter=LocalLimiter(LimitConfig()), wait_s=1.0)
    with pytest.raises(ModelUnavailable, match="cannot reach"):
        model.generate(_request())


def test_a_daily_quota_pauses_the_model(fake_gemini: Callable[..., FakeGemini]) -> None:
    # Given the API says the model's per-day quota is spent
    fake = fake_gemini(faults=[FaultRule(Fault.rate_day)])
    model = _model(fake)
    # When a turn asks for the model, the session is stopped for the quota
    with pytest.raises(ModelPaused) as raised:
        model.generate(_request())
    assert raised.value.outcome is Outcome.quota
    # When another turn asks for the model
    with pytest.raises(ModelPaused, match="paused until"):
        model.generate(_request())
    # Then the limiter refused it: no second request reached the API
    assert len(fake.served) == 1
    paused = model.limiter.state(MODEL).paused
    assert paused is not None and paused.until.timestamp() > time.time() + 60


def test_a_429_naming_no_quota_cools_the_fleet_down_then_pauses_it(
    fake_gemini: Callable[..., FakeGemini],
) -> None:
    # Given the API answers 429 with only a Help detail, the form a spent daily quota takes
    fake = fake_gemini(faults=[FaultRule(Fault.rate_help, times=None)])
    model = _model(fake)
    # When a turn asks for the model
    with pytest.raises(RateLimited) as raised:
        model.generate(_request())
    # Then it is a rate limit of unknown quota, and the whole fleet cools down
    assert (raised.value.quota, raised.value.delay_s) == ("unknown", COOLDOWN_S)
    assert model.limiter.state(MODEL).cooldown_until is not None
    assert model.limiter.state(MODEL).paused is None
    # When it repeats after each cool-down
    with pytest.raises(RateLimited):
        model.generate(_request())
    with pytest.raises(ModelPaused) as paused:
        model.generate(_request())
    # Then the third one pauses the model fleet-wide, and the session stops for the quota
    assert paused.value.outcome is Outcome.quota
    state = model.limiter.state(MODEL).paused
    assert state is not None and state.until.timestamp() > time.time() + 60
    with pytest.raises(ModelPaused):
        model.generate(_request())
    assert [s.status for s in fake.served] == [429, 429, 429]


@pytest.mark.parametrize(
    ("message", "delay_s"),
    [("Please retry in 45.2s.", 45.2), ("Please retry in 817.5ms.", 0.8175), ("slow down", None)],
)
def test_a_retry_delay_is_read_from_the_message_when_no_retry_info_says(
    message: str, delay_s: float | None
) -> None:
    assert retry_delay_s([], message) == delay_s


def test_a_malformed_call_is_asked_for_once_more(fake_gemini: Callable[..., FakeGemini]) -> None:
    # Given the model's first answer is a malformed function call
    fake = fake_gemini(faults=[FaultRule(Fault.malformed)])
    model = _model(fake)
    # When a turn is taken
    turn = model.generate(_request())
    # Then it was asked again, and both calls are billed to the turn
    assert [s.fault for s in fake.served] == ["malformed", None]
    assert turn.calls and turn.finish_reason == "STOP"
    single = model.generate(_request()).usage.prompt_tokens
    assert turn.usage.prompt_tokens == 2 * single


def test_a_second_call_the_budget_cannot_hold_is_not_sent(
    fake_gemini: Callable[..., FakeGemini],
) -> None:
    # Given a malformed first answer, and a run whose budget holds no second call
    fake = fake_gemini(faults=[FaultRule(Fault.malformed)])
    asked: list[bool] = []

    def refuse() -> bool:
        asked.append(False)
        return False

    # When a turn is taken
    turn = _model(fake).generate(replace(_request(), may_resend=refuse))
    # Then the provider asked, was refused, and returned the malformed answer as it came
    assert asked == [False]
    assert [s.fault for s in fake.served] == ["malformed"]
    assert turn.finish_reason == "MALFORMED_FUNCTION_CALL" and not turn.calls


def test_the_output_limit_is_sent_and_honoured(fake_gemini: Callable[..., FakeGemini]) -> None:
    # Given a request that allows fewer output tokens than the page the model will write
    fake = fake_gemini()
    history = [dashboard_brief(1, 0)]
    model = _model(fake)
    first = model.generate(_request(history))
    history += [first.content, _respond(first.content)]
    # When the turn that writes the page is asked for with a 300-token limit
    turn = model.generate(replace(_request(history), max_output_tokens=300))
    # Then the answer was cut off at the limit, thinking included, with no call in it
    assert turn.finish_reason == "MAX_TOKENS" and not turn.calls
    assert turn.usage.output_tokens + turn.usage.thoughts_tokens == 300


def test_a_read_timeout_may_have_been_billed_and_a_refused_connection_not() -> None:
    # Given the transport failures of a call before and after it was sent
    before = classify(httpx2.ConnectError("refused"))
    after = classify(httpx2.ReadTimeout("slow"))
    # Then only the one after sending keeps its cost reserved
    assert isinstance(before, ModelUnavailable) and not before.maybe_billed
    assert isinstance(after, ModelUnavailable) and after.maybe_billed


def test_thinking_is_a_level_for_gemini_3_and_a_budget_for_2_5() -> None:
    three = thinking_for("gemini-3-flash-preview", level="low", budget=512)
    two = thinking_for("gemini-2.5-flash", level="low", budget=512)
    assert (three.thinking_level, three.thinking_budget) == ("LOW", None)
    assert (two.thinking_level, two.thinking_budget) == (None, 512)


def test_an_explicit_cache_carries_the_prefix(fake_gemini: Callable[..., FakeGemini]) -> None:
    # Given the run's prefix cached at the API
    fake = fake_gemini()
    model = _model(fake)
    plain = _request()
    cached = create_cache(
        model.client,
        model=MODEL,
        system_instruction=plain.system_instruction,
        tools=plain.tools,
        tool_mode="AUTO",
        ttl_s=600,
        display_name="run 1",
    )
    assert cached.name.startswith("cachedContents/") and cached.tokens > 0
    # When a turn names it instead of sending the prefix
    turn = model.generate(replace(plain, cached_content=cached.name))
    # Then the API answered from it, counting the cached prefix as cached input
    assert [s.cache for s in fake.served] == [cached.name]
    assert turn.calls and turn.usage.cached_tokens >= cached.tokens
    # and a request that repeats the prefix beside the cache is refused, as the API does
    with pytest.raises(errors.ClientError, match="CachedContent can not be used"):
        model.client.models.generate_content(
            model=MODEL,
            contents=[types.Content.model_validate(c) for c in plain.history],
            config=types.GenerateContentConfig(
                cached_content=cached.name, system_instruction="again"
            ),
        )
    # and once deleted it is gone
    delete_cache(model.client, cached.name)
    assert (fake.caches.created, fake.caches.deleted, len(fake.caches)) == (1, 1, 0)
    with pytest.raises(ModelFatal, match="not found"):
        model.generate(replace(plain, cached_content=cached.name))
