"""The fleet-wide model-call limiter, against real Redis and in one process."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import uuid4

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from worker.errors import (
    ConfigError,
    LimiterUnavailable,
    ModelPaused,
    ModelUnavailable,
    SwarmError,
    Throttled,
    TransientError,
)
from worker.models.limiter.base import (
    BUSY_DELAY_S,
    LimitConfig,
    Limiter,
    LocalLimiter,
    Outcome,
    Permit,
)
from worker.models.limiter.redis import RedisLimiter

MODEL = "gemini-test"
MakeLimiter = Callable[..., Limiter]


@pytest.fixture
def make_redis_limiter(redis_url: str) -> Iterator[MakeLimiter]:
    """Factory: a RedisLimiter on its own client (as another process would have), all sharing
    one unique key prefix; the keys are deleted afterwards."""
    prefix = f"swarm:test:{uuid4().hex}"
    clients: list[redis.Redis] = []

    def make(**config: Any) -> Limiter:
        client = redis.Redis.from_url(redis_url)
        clients.append(client)
        return RedisLimiter(client, LimitConfig(**config), prefix=prefix)

    yield make
    for client in clients:
        for key in client.scan_iter(f"{prefix}:*"):
            client.delete(key)
        client.close()


@pytest.fixture(params=[pytest.param("redis", marks=pytest.mark.services), "local"])
def make_limiter(request: pytest.FixtureRequest) -> MakeLimiter:
    """Factory: a RedisLimiter or a LocalLimiter with the given limits."""
    if request.param == "local":
        return lambda **config: LocalLimiter(LimitConfig(**config))
    make: MakeLimiter = request.getfixturevalue("make_redis_limiter")
    return make


def _throttled(limiter: Limiter, *, tokens: int = 1, wait_s: float = 0.0) -> Throttled:
    with pytest.raises(Throttled) as caught:
        limiter.acquire(MODEL, tokens=tokens, wait_s=wait_s)
    return caught.value


def _call(limiter: Limiter, outcome: Outcome = Outcome.ok, **release: Any) -> Permit:
    """One whole model call: acquire, then release with ``outcome``."""
    permit = limiter.acquire(MODEL, tokens=1, wait_s=0)
    limiter.release(permit, tokens_used=1, outcome=outcome, **release)
    return permit


def test_grants_k_permits_then_throttles_with_a_delay(make_limiter: MakeLimiter) -> None:
    # Given a limit of 3 calls in flight
    limiter = make_limiter(max_concurrency=3)
    # When 3 permits are taken
    permits = [limiter.acquire(MODEL, tokens=10, wait_s=0) for _ in range(3)]
    # Then they are distinct, and a 4th is refused with a short suggested delay
    assert len({p.id for p in permits}) == 3
    assert all(p.reserved_tokens == 10 and p.model == MODEL for p in permits)
    refused = _throttled(limiter)
    assert refused.reason == "concurrency"
    assert 0 < refused.delay_s <= BUSY_DELAY_S
    assert isinstance(refused, ModelUnavailable)
    # And another model has limits of its own
    limiter.acquire("other-model", tokens=1, wait_s=0)


def test_release_frees_a_slot(make_limiter: MakeLimiter) -> None:
    # Given the only slot taken
    limiter = make_limiter(max_concurrency=1)
    permit = limiter.acquire(MODEL, tokens=1, wait_s=0)
    _throttled(limiter)
    # When it is released
    limiter.release(permit, tokens_used=1, outcome=Outcome.failed)
    # Then the next acquire gets it at once
    assert limiter.acquire(MODEL, tokens=1, wait_s=0).id != permit.id


def test_a_waiting_acquire_gets_the_slot_another_thread_releases(
    make_limiter: MakeLimiter,
) -> None:
    # Given the only slot held by another thread, which releases it once we are waiting
    limiter = make_limiter(max_concurrency=1)
    held = limiter.acquire(MODEL, tokens=1, wait_s=0)
    releaser = threading.Timer(
        0.2, lambda: limiter.release(held, tokens_used=1, outcome=Outcome.ok)
    )
    # When we wait for a permit
    releaser.start()
    started = time.monotonic()
    permit = limiter.acquire(MODEL, tokens=1, wait_s=5)
    releaser.join()
    # Then we got it soon after the release, long before the wait ran out
    assert permit.id != held.id
    assert 0.15 < time.monotonic() - started < 2


@pytest.mark.services
def test_two_processes_share_one_limit(make_redis_limiter: MakeLimiter) -> None:
    # Given two limiters on separate Redis connections, as two worker hosts have
    first = make_redis_limiter(max_concurrency=2)
    second = make_redis_limiter(max_concurrency=2)
    # When the first takes both slots
    permits = [first.acquire(MODEL, tokens=5, wait_s=0) for _ in range(2)]
    # Then the second is refused and sees them in flight
    assert _throttled(second).reason == "concurrency"
    assert second.state(MODEL).in_flight == 2
    # And a slot the first frees goes to the second
    first.release(permits[0], tokens_used=5, outcome=Outcome.ok)
    second.acquire(MODEL, tokens=5, wait_s=0)
    # And a 429 seen by the first cuts the limit and cools the model down for the second
    first.release(permits[1], tokens_used=5, outcome=Outcome.rate_limited, retry_delay_s=5)
    assert second.state(MODEL).concurrency_limit == 1
    assert _throttled(second).reason == "cooldown"


def test_requests_per_minute(make_limiter: MakeLimiter) -> None:
    # Given a limit of 3 requests per minute, with slots to spare
    limiter = make_limiter(max_concurrency=10, requests_per_minute=3)
    # When 3 calls are made and finished
    for _ in range(3):
        _call(limiter)
    # Then a 4th is refused until the first leaves the 60 s window
    refused = _throttled(limiter)
    assert refused.reason == "requests"
    assert 59 < refused.delay_s <= 60
    # And a wait shorter than that fails at once instead of sleeping in vain
    started = time.monotonic()
    assert _throttled(limiter, wait_s=2).reason == "requests"
    assert time.monotonic() - started < 0.5


def test_tokens_per_minute_reserve_then_correct(make_limiter: MakeLimiter) -> None:
    # Given 100 tokens per minute and a call estimated at 60
    limiter = make_limiter(max_concurrency=10, tokens_per_minute=100)
    big = limiter.acquire(MODEL, tokens=60, wait_s=0)
    # When a call estimated at 50 asks
    refused = _throttled(limiter, tokens=50)
    # Then it is refused until the first grant leaves the window
    assert refused.reason == "tokens"
    assert 59 < refused.delay_s <= 60
    # And when the first call turns out to use 30, the correction makes room
    limiter.release(big, tokens_used=30, outcome=Outcome.ok)
    second = limiter.acquire(MODEL, tokens=50, wait_s=0)
    assert limiter.state(MODEL).tokens_in_window == 80
    # And a call that used more than its estimate is charged the difference
    limiter.release(second, tokens_used=65, outcome=Outcome.ok)
    assert limiter.state(MODEL).tokens_in_window == 95
    assert _throttled(limiter, tokens=10).reason == "tokens"


def test_a_call_larger_than_the_budget_runs_alone(make_limiter: MakeLimiter) -> None:
    # Given 100 tokens per minute and an empty window
    limiter = make_limiter(tokens_per_minute=100)
    # When a call estimated at 500 asks, it is let through (else it could never run)
    limiter.acquire(MODEL, tokens=500, wait_s=0)
    # Then nothing else fits in the same minute
    assert _throttled(limiter, tokens=1).reason == "tokens"


def test_429_halves_k_once_per_burst_and_successes_grow_it_back(
    make_limiter: MakeLimiter,
) -> None:
    # Given K = 8 and four calls in flight
    limiter = make_limiter(max_concurrency=8, min_concurrency=2)
    burst = [limiter.acquire(MODEL, tokens=1, wait_s=0) for _ in range(4)]
    # When all four come back 429 (no retry delay)
    for permit in burst:
        limiter.release(permit, tokens_used=1, outcome=Outcome.rate_limited)
    # Then K was halved once, not four times: they were all launched under the old K
    assert limiter.state(MODEL).concurrency_limit == 4
    # And a 429 on a call launched after the cut halves again, but not below the minimum
    _call(limiter, Outcome.rate_limited)
    assert limiter.state(MODEL).concurrency_limit == 2
    _call(limiter, Outcome.rate_limited)
    assert limiter.state(MODEL).concurrency_limit == 2
    # And failures leave it alone
    _call(limiter, Outcome.failed)
    assert limiter.state(MODEL).concurrency_limit == 2
    # When calls succeed, K grows by about one per K successes, up to the maximum
    limits = []
    for _ in range(60):
        _call(limiter)
        limits.append(limiter.state(MODEL).concurrency_limit)
    assert limits[:3] == [2, 2, 3]
    assert all(0 <= b - a <= 1 for a, b in itertools.pairwise(limits))
    assert 20 <= limits.index(8) <= 40
    assert limits[-1] == 8


def test_a_second_release_of_a_permit_changes_nothing(make_limiter: MakeLimiter) -> None:
    # Given K cut to 2 (stored as 2.0), then one success (2.5)
    limiter = make_limiter(max_concurrency=4)
    _call(limiter, Outcome.rate_limited)
    _call(limiter)
    permit = limiter.acquire(MODEL, tokens=40, wait_s=0)
    # When the next success is released twice
    for _ in range(2):
        limiter.release(permit, tokens_used=10, outcome=Outcome.ok)
    # Then it counted once (2.9, not 3.2), and no count went wrong
    state = limiter.state(MODEL)
    assert (state.concurrency_limit, state.in_flight) == (2, 0)
    assert state.tokens_in_window == 1 + 1 + 10
    _call(limiter)
    assert limiter.state(MODEL).concurrency_limit == 3


def test_cooldown_blocks_acquires_until_it_passes(make_limiter: MakeLimiter) -> None:
    # Given a 429 carrying a 0.3 s retry delay
    limiter = make_limiter(max_concurrency=4)
    _call(limiter, Outcome.rate_limited, retry_delay_s=0.3)
    # Then no permit is granted at once, and the state shows the cool-down
    refused = _throttled(limiter)
    assert refused.reason == "cooldown"
    assert 0 < refused.delay_s <= 0.3
    cooldown_until = limiter.state(MODEL).cooldown_until
    assert cooldown_until is not None
    assert timedelta(0) < cooldown_until - datetime.now(UTC) <= timedelta(seconds=0.35)
    # When an acquire may wait longer than that, it gets a permit once the cool-down passed
    started = time.monotonic()
    limiter.acquire(MODEL, tokens=1, wait_s=3)
    assert time.monotonic() - started >= 0.2
    assert limiter.state(MODEL).cooldown_until is None


def test_pause_reports_reason_and_until_then_expires(make_limiter: MakeLimiter) -> None:
    # Given a model paused for its daily quota for 0.4 s
    limiter = make_limiter()
    until = datetime.now(UTC) + timedelta(seconds=0.4)
    limiter.pause(MODEL, until=until, reason="daily quota exhausted")
    # When a worker asks for a permit, even willing to wait
    with pytest.raises(ModelPaused) as caught:
        limiter.acquire(MODEL, tokens=1, wait_s=5)
    # Then it is told at once why and until when, as an error not to retry
    paused = caught.value
    assert (paused.model, paused.reason) == (MODEL, "daily quota exhausted")
    assert abs(paused.until - until) < timedelta(milliseconds=1)
    assert paused.until.tzinfo is not None
    assert isinstance(caught.value, SwarmError)
    assert not isinstance(caught.value, TransientError)
    state = limiter.state(MODEL).paused
    assert state is not None and (state.until, state.reason) == (paused.until, paused.reason)
    # And once that time has passed, permits are granted again
    time.sleep(max(0.0, (until - datetime.now(UTC)).total_seconds()) + 0.05)
    assert limiter.state(MODEL).paused is None
    limiter.acquire(MODEL, tokens=1, wait_s=0)


def test_pause_in_the_past_unpauses(make_limiter: MakeLimiter) -> None:
    # Given a model paused for an hour
    limiter = make_limiter()
    limiter.pause(MODEL, until=datetime.now(UTC) + timedelta(hours=1), reason="quota")
    # When it is paused again until a time already past
    limiter.pause(MODEL, until=datetime.now(UTC) - timedelta(seconds=1), reason="resumed")
    # Then it is not paused
    assert limiter.state(MODEL).paused is None
    limiter.acquire(MODEL, tokens=1, wait_s=0)


def test_expired_permit_frees_its_slot_and_late_release_is_harmless(
    make_limiter: MakeLimiter,
) -> None:
    # Given both slots held by workers that died, with permits that expire after 0.3 s
    limiter = make_limiter(max_concurrency=2, slot_ttl_s=0.3)
    lost = [limiter.acquire(MODEL, tokens=20, wait_s=0) for _ in range(2)]
    # When another worker waits for a permit, it gets a reclaimed slot
    fresh = limiter.acquire(MODEL, tokens=30, wait_s=3)
    # Then a late release of an expired permit frees nothing and leaves K alone
    limiter.release(lost[0], tokens_used=0, outcome=Outcome.rate_limited)
    state = limiter.state(MODEL)
    assert (state.in_flight, state.concurrency_limit) == (1, 2)
    assert state.tokens_in_window == 0 + 20 + 30
    limiter.acquire(MODEL, tokens=1, wait_s=0)
    assert _throttled(limiter).reason == "concurrency"
    limiter.release(fresh, tokens_used=30, outcome=Outcome.ok)
    assert limiter.state(MODEL).in_flight == 1


def test_state_reports_the_figures(make_limiter: MakeLimiter) -> None:
    # Given some traffic on a model
    limiter = make_limiter(max_concurrency=5, requests_per_minute=10, tokens_per_minute=1000)
    first = limiter.acquire(MODEL, tokens=100, wait_s=0)
    limiter.acquire(MODEL, tokens=50, wait_s=0)
    limiter.release(first, tokens_used=70, outcome=Outcome.ok)
    # When its state is read
    state = limiter.state(MODEL)
    # Then it shows limits and use
    assert (state.model, state.concurrency_limit, state.max_concurrency) == (MODEL, 5, 5)
    assert (state.in_flight, state.requests_in_window, state.tokens_in_window) == (1, 2, 120)
    assert (state.requests_per_minute, state.tokens_per_minute) == (10, 1000)
    assert (state.cooldown_until, state.paused) == (None, None)
    # And an untouched model shows no use
    idle = limiter.state("idle-model")
    assert (idle.concurrency_limit, idle.in_flight, idle.tokens_in_window) == (5, 0, 0)


def test_many_threads_never_hold_more_than_k(make_limiter: MakeLimiter) -> None:
    # Given K = 3 and 20 threads each making 10 calls
    limiter = make_limiter(max_concurrency=3)
    lock = threading.Lock()
    held, most, done = 0, 0, 0
    errors: list[BaseException] = []

    def work() -> None:
        nonlocal held, most, done
        try:
            for _ in range(10):
                permit = limiter.acquire(MODEL, tokens=1, wait_s=60)
                with lock:
                    held += 1
                    most = max(most, held)
                time.sleep(0.005)  # the model call
                with lock:
                    held -= 1
                    done += 1
                limiter.release(permit, tokens_used=1, outcome=Outcome.ok)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(20)]
    # When they all run at once
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then every call ran, never more than 3 at a time, and the limit was reached
    assert errors == []
    assert done == 200
    assert most == 3
    assert limiter.state(MODEL).in_flight == 0


@pytest.mark.services
def test_unreachable_redis_is_a_model_unavailable_error() -> None:
    # Given a limiter whose Redis is not listening
    client = redis.Redis(
        host="127.0.0.1", port=1, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0)
    )
    limiter = RedisLimiter(client, LimitConfig())
    # When a permit is asked for, Then the error says "try later" and keeps its cause
    with pytest.raises(LimiterUnavailable) as caught:
        limiter.acquire(MODEL, tokens=1, wait_s=0)
    assert isinstance(caught.value, ModelUnavailable)
    assert caught.value.delay_s is not None and caught.value.delay_s > 0
    assert isinstance(caught.value.__cause__, redis.RedisError)
    assert "Redis" in str(caught.value)
    client.close()


def test_config_refuses_impossible_limits() -> None:
    with pytest.raises(ConfigError):
        LimitConfig(max_concurrency=2, min_concurrency=3)
    with pytest.raises(ConfigError):
        LimitConfig(tokens_per_minute=0)


@pytest.mark.services
def test_strikes_are_counted_fleet_wide_over_a_sliding_window(
    make_redis_limiter: MakeLimiter,
) -> None:
    # Given two workers on one limit in Redis
    one, two = make_redis_limiter(), make_redis_limiter()
    # When both count unexplained refusals of the model within the window
    assert one.strike(MODEL, window_s=0.5) == 1
    assert two.strike(MODEL, window_s=0.5) == 2
    assert one.strike("another-model", window_s=0.5) == 1
    # Then, once the window has passed, counting starts again
    time.sleep(0.6)
    assert two.strike(MODEL, window_s=0.5) == 1


def test_strikes_are_counted_in_process_without_redis() -> None:
    limiter = LocalLimiter(LimitConfig())
    assert [limiter.strike(MODEL, window_s=0.3) for _ in range(3)] == [1, 2, 3]
    time.sleep(0.35)
    assert limiter.strike(MODEL, window_s=0.3) == 1
