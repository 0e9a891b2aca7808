"""The provider on real recorded Gemini API bodies, replayed to the real SDK.

Each case in ``corpus/`` is a body as it was published (source and notes beside it). Costs
are worked out by hand from the dated price table (``worker/models/pricing.py``): dollars per
million tokens of input, cached input and output (thinking included), tool-use prompt
tokens billed as input.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from google import genai
from google.genai import types

from tests.worker.models.replay import Case, Replay, load, names
from worker.errors import (
    CacheNotFound,
    ModelFatal,
    ModelPaused,
    ModelUnavailable,
    RateLimited,
    SwarmError,
)
from worker.models.base import ModelRequest, ModelTurn, TokenUsage
from worker.models.gemini.client import (
    MALFORMED,
    MALFORMED_TEXT,
    CachedPrefix,
    GeminiModel,
    create_cache,
    make_client,
    usage_of,
)
from worker.models.gemini.failures import classify
from worker.models.limiter.base import LimitConfig, LocalLimiter
from worker.models.pricing import PriceTable
from worker.states import Outcome

PRICES = PriceTable.load()
#: Fleet cool-down after a 429 that names no quota, as the provider is built in these tests.
COOLDOWN_S = 45.0


def _request(model: str) -> ModelRequest:
    return ModelRequest(
        model=model,
        system_instruction="You are terse.",
        tools=(),
        history=({"role": "user", "parts": [{"text": "hi"}]},),
    )


@contextmanager
def _provider(case: Case) -> Iterator[tuple[GeminiModel, Replay]]:
    with Replay([(case.status, case.body)]) as replay:
        client = make_client(api_key="replay-key", base_url=replay.url, timeout_s=5.0)
        limiter = LocalLimiter(LimitConfig())
        yield GeminiModel(client=client, limiter=limiter, wait_s=0.0, cooldown_s=COOLDOWN_S), replay


def _turn(name: str) -> tuple[ModelTurn, Replay]:
    case = load(name)
    with _provider(case) as (model, replay):
        return model.generate(_request(case.model)), replay


def _failure(name: str) -> tuple[SwarmError, GeminiModel]:
    case = load(name)
    with _provider(case) as (model, _):
        with pytest.raises(SwarmError) as raised:
            model.generate(_request(case.model))
        return raised.value, model


def test_the_corpus_has_every_case_with_its_source() -> None:
    cases = [load(n) for n in names()]
    assert len(cases) >= 15
    for case in cases:
        assert case.source and case.note, case.name
        assert case.kind in ("generate", "cache_create", "usage"), case.name


def test_a_function_call_with_a_long_signature_and_no_id() -> None:
    turn, _ = _turn("200_function_call_signature")
    [call] = turn.calls
    assert (call.name, call.args, call.id) == ("poi_agent", {"request": "London"}, None)
    assert turn.text == "" and turn.finish_reason == "STOP"
    # the signature goes back into the history byte for byte
    part = turn.content["parts"][0]
    signed = load("200_function_call_signature").body["candidates"][0]["content"]["parts"][0]
    # (dumped in the URL-safe alphabet, which the SDK reads back as it reads the standard one)
    kept = base64.urlsafe_b64decode(part["thought_signature"])
    assert kept == base64.b64decode(signed["thoughtSignature"]) and len(kept) > 1000
    assert turn.usage == TokenUsage(prompt_tokens=1876, output_tokens=15, thoughts_tokens=255)
    # gemini-2.5-pro: 1,876 input at $1.25, 15 + 255 output at $10.00
    expected = (1876 * 1.25 + 270 * 10.00) / 1e6
    assert PRICES.cost_usd("gemini-2.5-pro", turn.usage) == pytest.approx(expected)


def test_a_text_answer_with_thinking() -> None:
    turn, _ = _turn("200_text_with_thoughts")
    assert turn.calls == () and turn.text.startswith("I apologize for that!")
    assert turn.finish_reason == "STOP"
    assert turn.usage == TokenUsage(prompt_tokens=12, output_tokens=87, thoughts_tokens=156)
    # gemini-2.5-flash: 12 input at $0.30, 87 + 156 output at $2.50
    expected = (12 * 0.30 + 243 * 2.50) / 1e6
    assert PRICES.cost_usd("gemini-2.5-flash", turn.usage) == pytest.approx(expected)


def test_an_implicit_cache_hit_covers_a_prefix_of_the_prompt() -> None:
    turn, _ = _turn("200_implicit_cache_hit")
    assert turn.text.startswith("\\033[97m\nAbsolutely!")
    assert turn.usage == TokenUsage(
        prompt_tokens=326, cached_tokens=173, output_tokens=63, thoughts_tokens=154
    )
    # gemini-2.5-flash: 153 uncached at $0.30, 173 cached at $0.03, 217 output at $2.50
    expected = (153 * 0.30 + 173 * 0.03 + 217 * 2.50) / 1e6
    assert PRICES.cost_usd("gemini-2.5-flash", turn.usage) == pytest.approx(expected)


def test_a_signature_on_a_thought_part_is_kept_and_shows_no_text() -> None:
    turn, _ = _turn("200_signature_on_a_thought_part")
    assert turn.calls == () and turn.text == ""
    # no finishReason in the body: the turn reads STOP
    assert turn.finish_reason == "STOP"
    [part] = turn.content["parts"]
    assert part["thought"] is True and part["thought_signature"]
    assert turn.usage == TokenUsage(prompt_tokens=16472, cached_tokens=7981, thoughts_tokens=3)
    # gemini-2.5-pro: 8,491 uncached at $1.25, 7,981 cached at $0.125, 3 thinking at $10.00
    expected = (8491 * 1.25 + 7981 * 0.125 + 3 * 10.00) / 1e6
    assert PRICES.cost_usd("gemini-2.5-pro", turn.usage) == pytest.approx(expected)


def test_tool_use_prompt_tokens_are_billed_as_input() -> None:
    turn, _ = _turn("200_tool_use_tokens")
    assert turn.text == "Some response text" and turn.calls == ()
    assert turn.usage == TokenUsage(
        prompt_tokens=427,
        cached_tokens=280,
        output_tokens=486,
        thoughts_tokens=478,
        tool_use_tokens=1399,
    )
    # gemini-3-pro-preview: (147 uncached + 1,399 tool use) at $2.00, 280 cached at $0.20,
    # 486 + 478 output at $12.00
    expected = (1546 * 2.00 + 280 * 0.20 + 964 * 12.00) / 1e6
    assert PRICES.cost_usd("gemini-3-pro-preview", turn.usage) == pytest.approx(expected)


def test_a_malformed_function_call_is_asked_again_and_both_are_billed() -> None:
    turn, replay = _turn("200_malformed_function_call")
    # Given the API answers malformed twice, the turn stands in the history as text
    assert len(replay.requests) == 2
    assert turn.finish_reason == MALFORMED and turn.calls == ()
    assert turn.content == {"role": "model", "parts": [{"text": MALFORMED_TEXT}]}
    assert turn.usage == TokenUsage(prompt_tokens=2 * 7542)
    # gemini-2.5-flash: twice 7,542 input at $0.30
    expected = (2 * 7542 * 0.30) / 1e6
    assert PRICES.cost_usd("gemini-2.5-flash", turn.usage) == pytest.approx(expected)


def test_a_blocked_prompt_is_fatal_and_names_its_reason() -> None:
    error, _ = _failure("200_blocked_prompt")
    assert type(error) is ModelFatal
    assert "PROHIBITED_CONTENT" in str(error)


def test_explicit_cache_usage_counts_the_cache_as_cached_input() -> None:
    case = load("200_explicit_cache_usage")
    response = types.GenerateContentResponse._from_response(response=case.body, kwargs={})
    usage = usage_of(response.usage_metadata)
    assert usage == TokenUsage(prompt_tokens=7036, cached_tokens=7021, output_tokens=19)
    # Priced as gemini-2.5-flash-lite (the recorded model is not in the table): 15 uncached
    # at $0.10, 7,021 cached at $0.01, 19 output at $0.40
    expected = (15 * 0.10 + 7021 * 0.01 + 19 * 0.40) / 1e6
    assert PRICES.cost_usd("gemini-2.5-flash-lite", usage) == pytest.approx(expected)


def _create_cache(client: genai.Client) -> CachedPrefix:
    """Cache a small prefix for an hour, as a run's first turn would."""
    return create_cache(
        client,
        model="gemini-2.5-flash",
        system_instruction="You are terse.",
        tools=(),
        tool_mode="AUTO",
        ttl_s=3600,
        display_name="swarm run 1",
    )


def test_a_created_cache_gives_its_name_size_and_end_of_life() -> None:
    case = load("200_cache_create")
    with Replay([(case.status, case.body)]) as replay:
        client = make_client(api_key="replay-key", base_url=replay.url, timeout_s=5.0)
        made = _create_cache(client)
    assert made.name == "cachedContents/ez2yh6u6my9gnjvyigtxvnuf6e5qc79vgd7cc668"
    assert made.tokens == 7021
    assert made.expires_at is not None
    created = datetime(2026, 9, 7, 1, 18, 17, 438678, tzinfo=UTC)
    hours = (made.expires_at - created).total_seconds() / 3600
    assert hours == pytest.approx(1.0, abs=1e-3)
    # Its storage for that hour on gemini-2.5-flash: 7,021 tokens at $1.00 per million per hour
    assert PRICES.storage_usd("gemini-2.5-flash", tokens=7021, hours=hours) == pytest.approx(
        7021 * 1.00 * hours / 1e6
    )


def test_a_cache_below_the_minimum_is_refused_for_good() -> None:
    case = load("400_cache_too_small")
    with Replay([(case.status, case.body)]) as replay:
        client = make_client(api_key="replay-key", base_url=replay.url, timeout_s=5.0)
        with pytest.raises(ModelFatal, match="too small") as raised:
            _create_cache(client)
    assert type(raised.value) is ModelFatal


def test_a_request_repeating_the_cached_prefix_is_fatal_not_a_missing_cache() -> None:
    error, _ = _failure("400_cache_with_prefix")
    assert type(error) is ModelFatal and "can not be used" in str(error)


def test_a_missing_cache_is_a_403_the_provider_can_recover_from() -> None:
    error, _ = _failure("403_cache_not_found")
    assert type(error) is CacheNotFound
    assert isinstance(error, ModelFatal)


@pytest.mark.parametrize("name", ["429_help_only", "429_message_only", "429_wrapped_in_an_array"])
def test_a_429_naming_no_quota_cools_the_fleet_down(name: str) -> None:
    error, model = _failure(name)
    assert isinstance(error, RateLimited)
    assert (error.quota, error.delay_s) == ("unknown", COOLDOWN_S)
    state = model.limiter.state(load(name).model)
    assert state.cooldown_until is not None and state.paused is None
    assert state.cooldown_until.timestamp() > time.time() + COOLDOWN_S - 5


def test_a_429_with_several_violations_one_per_day_pauses_the_model() -> None:
    error, model = _failure("429_several_violations")
    assert isinstance(error, ModelPaused) and error.outcome is Outcome.quota
    paused = model.limiter.state("gemini-2.5-flash").paused
    assert paused is not None and paused.until > datetime.now(UTC)


def test_a_per_day_429_takes_its_delay_from_retry_info_and_pauses() -> None:
    case = load("429_per_day_retry_in")
    with Replay([(case.status, case.body)]) as replay:
        client = make_client(api_key="replay-key", base_url=replay.url, timeout_s=5.0)
        with pytest.raises(Exception) as raised:
            client.models.generate_content(model=case.model, contents="hi")
    classified = classify(raised.value)
    assert isinstance(classified, RateLimited)
    assert (classified.quota, classified.delay_s) == ("day", 36.0)
    error, _ = _failure("429_per_day_retry_in")
    assert isinstance(error, ModelPaused)


def test_a_per_minute_429_waits_the_servers_delay() -> None:
    error, model = _failure("429_per_minute_tokens")
    assert isinstance(error, RateLimited)
    assert (error.quota, error.delay_s) == ("minute", 26.0)
    assert model.limiter.state("gemini-2.5-flash").cooldown_until is not None


@pytest.mark.parametrize("name", ["500_internal", "503_unavailable"])
def test_server_errors_are_transient(name: str) -> None:
    error, _ = _failure(name)
    assert type(error) is ModelUnavailable
    assert str(load(name).status) in str(error)


def test_a_daily_quota_pause_ends_at_pacific_midnight_written_in_utc() -> None:
    # Given the API's per-day 429, When a session's call meets it
    error, model = _failure("429_per_day_retry_in")
    assert isinstance(error, ModelPaused)
    # Then the pause ends at the next midnight in the quota's time zone, held in UTC
    zone = ZoneInfo("America/Los_Angeles")
    local = datetime.now(zone)
    midnight = (local + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    want = midnight.astimezone(UTC)
    assert error.until == want and error.until.utcoffset() == timedelta(0)
    # and the session's record says that instant with its Z, as the fleet's pause does
    assert f"paused until {want:%Y-%m-%d %H:%M:%S}Z" in str(error)
    paused = model.limiter.state("gemini-2.5-flash").paused
    assert paused is not None and paused.until == want
