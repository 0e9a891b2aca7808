"""Fleet-wide limits on model calls: concurrency (AIMD), requests and tokens per minute.

Before each model call a worker asks for a :class:`Permit`; afterwards it releases it with
the :class:`Outcome`. :class:`~worker.models.limiter.redis.RedisLimiter` keeps the state in
Redis under ``<prefix>:<model>:`` and decides in Lua scripts on Redis's clock, so every
process on every host shares one limit; :class:`LocalLimiter` does the same inside one process.

Requests and tokens per minute are counted over a *sliding* 60 s window (a log of grants),
not fixed minutes, so no 60 s span ever holds more than the limit. Tokens are reserved from
the estimate at acquire and corrected to the actual count at release while the grant is
still in the window. Concurrency ``K`` starts at ``max_concurrency``; a 429 halves it (once
per burst: only calls granted after the last cut cut again), each success adds ``1/K``.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from typing import NamedTuple, Protocol
from uuid import uuid4

from worker.errors import ConfigError, ModelPaused, Throttled

logger = logging.getLogger(__name__)

#: Length of the sliding window for requests and tokens per minute.
WINDOW_S = 60.0
#: First poll interval while every slot is busy or tokens are short; grows 1.5x to the cap.
POLL_S = 0.05
#: Cap of that poll interval.
POLL_MAX_S = 0.5
#: Retry delay suggested when every slot is busy: a release may come at any moment.
BUSY_DELAY_S = 1.0
#: Retry delay suggested when Redis cannot be reached.
UNREACHABLE_DELAY_S = 5.0
#: Keys of a model untouched this long expire: its ``K`` starts again at the maximum.
IDLE_TTL_S = 3600


@dataclass(frozen=True)
class Paused:
    """A model paused fleet-wide (e.g. its daily quota is spent) until ``until`` (UTC)."""

    model: str
    until: datetime
    reason: str


class Outcome(str, Enum):
    """How a model call that held a permit ended."""

    #: the call succeeded: ``K`` grows by about one per ``K`` successes
    ok = "ok"
    #: the provider answered 429: ``K`` halves; a retry delay starts a cool-down
    rate_limited = "rate_limited"
    #: any other failure: ``K`` is left alone
    failed = "failed"


@dataclass(frozen=True)
class LimitConfig:
    """Limits of one model, the same on every worker."""

    max_concurrency: int = 16
    min_concurrency: int = 1
    requests_per_minute: int = 1000
    tokens_per_minute: int = 1_000_000
    slot_ttl_s: float = 300.0
    """A permit not released by then (its worker died) frees its slot."""

    def __post_init__(self) -> None:
        if not 1 <= self.min_concurrency <= self.max_concurrency:
            raise ConfigError("need 1 <= min_concurrency <= max_concurrency")
        if min(self.requests_per_minute, self.tokens_per_minute) < 1 or self.slot_ttl_s <= 0:
            raise ConfigError("requests, tokens per minute and slot_ttl_s must be positive")


@dataclass(frozen=True)
class Permit:
    """Leave to make one model call; release it exactly once."""

    model: str
    id: str
    reserved_tokens: int


@dataclass(frozen=True)
class LimiterState:
    """A model's limits and current use, for ``status``."""

    model: str
    concurrency_limit: int
    max_concurrency: int
    in_flight: int
    requests_in_window: int
    requests_per_minute: int
    tokens_in_window: int
    tokens_per_minute: int
    cooldown_until: datetime | None
    paused: Paused | None


class Limiter(Protocol):
    """The seam every model call goes through: :class:`RedisLimiter` or :class:`LocalLimiter`."""

    def acquire(self, model: str, *, tokens: int, wait_s: float) -> Permit:
        """Take a permit for one call of ``model``, waiting up to ``wait_s`` seconds.

        Args:
            model: The model to be called.
            tokens: Estimated tokens of the call, reserved against tokens per minute. A call
                larger than the whole minute's budget gets a permit once the window is empty.
            wait_s: How long to wait; 0 tries once. A wait known to outlast it (a cool-down,
                the requests window) raises at once instead of sleeping.

        Returns:
            The permit, to be given back with :meth:`release`.

        Raises:
            ModelPaused: The model is paused; the session should stop, not retry.
            Throttled: No permit in time; retry after its ``delay_s``.
            LimiterUnavailable: Redis could not be reached.
        """
        ...

    def release(
        self,
        permit: Permit,
        *,
        tokens_used: int,
        outcome: Outcome,
        retry_delay_s: float | None = None,
    ) -> None:
        """Give a permit back and report how the call went.

        Releasing twice, or after the permit expired, frees nothing more, leaves ``K`` alone
        (a retry delay still starts the cool-down) and moves no count below zero.

        Args:
            permit: What :meth:`acquire` returned.
            tokens_used: Actual tokens of the call; replaces the reservation while the grant
                is still in the window.
            outcome: How the call ended; ``rate_limited`` halves ``K``.
            retry_delay_s: With ``rate_limited``: the server's retry delay; no permit for the
                model is granted anywhere until it has passed.

        Raises:
            LimiterUnavailable: Redis could not be reached (the slot frees itself after
                ``slot_ttl_s``, so a caller may log this and go on).
        """
        ...

    def pause(self, model: str, *, until: datetime, reason: str) -> None:
        """Refuse every permit for ``model`` until ``until`` (tz-aware); a past time unpauses.

        Raises:
            LimiterUnavailable: Redis could not be reached.
        """
        ...

    def state(self, model: str) -> LimiterState:
        """The model's current limit and use, for ``status``."""
        ...

    def strike(self, model: str, *, window_s: float) -> int:
        """Count one unexplained refusal of ``model`` (a 429 naming no quota), fleet-wide.

        Returns:
            How many were counted in the last ``window_s`` seconds, this one included.

        Raises:
            LimiterUnavailable: Redis could not be reached.
        """
        ...


class Wait(NamedTuple):
    """Why a permit was refused, and how long the wait is known (or guessed) to be."""

    reason: str
    """``concurrency``, ``tokens`` (upper bounds: polled) or ``requests``, ``cooldown``."""
    delay_s: float


def utc_from_epoch(epoch_s: float) -> datetime:
    """A Unix time as an aware UTC datetime."""
    return datetime.fromtimestamp(epoch_s, tz=UTC)


class PollingLimiter:
    """What both limiters share: the acquire loop, logging, the state report.

    Subclasses implement ``_attempt`` (one atomic try), ``release``, ``pause`` and ``state``.
    """

    config: LimitConfig

    def _attempt(self, model: str, permit_id: str, tokens: int) -> Permit | Paused | Wait:
        raise NotImplementedError

    def acquire(self, model: str, *, tokens: int, wait_s: float) -> Permit:
        """See :meth:`Limiter.acquire`."""
        deadline = time.monotonic() + wait_s
        permit_id, poll_s = uuid4().hex, POLL_S
        while True:
            got = self._attempt(model, permit_id, max(0, tokens))
            if isinstance(got, Permit):
                return got
            if isinstance(got, Paused):
                raise ModelPaused(model=got.model, until=got.until, reason=got.reason)
            # Slots and tokens can come back early (a release), so poll with jittered,
            # growing sleeps; a cool-down or the requests window ends at a known time.
            if got.reason in ("concurrency", "tokens"):
                sleep_s = poll_s * random.uniform(0.5, 1.5)
            else:
                sleep_s = got.delay_s + random.uniform(0, POLL_S)
            if sleep_s > deadline - time.monotonic():
                delay_s = got.delay_s
                if got.reason == "concurrency":
                    delay_s = min(delay_s, BUSY_DELAY_S)
                message = f"{model}: {got.reason} limit reached, retry in {delay_s:.2f}s"
                raise Throttled(message, delay_s=delay_s, reason=got.reason)
            time.sleep(sleep_s)
            poll_s = min(poll_s * 1.5, POLL_MAX_S)

    @staticmethod
    def _log_release(permit: Permit, outcome: Outcome, k: float, delay_s: float | None) -> None:
        if outcome is Outcome.rate_limited:
            logger.info("%s rate limited: concurrency %d, cool-down %ss", permit.model, k, delay_s)

    def _report(
        self,
        model: str,
        k: float,
        counts: tuple[int, int, int],
        cooldown_until: datetime | None,
        paused: Paused | None,
    ) -> LimiterState:
        c = self.config
        in_flight, requests, tokens = counts
        return LimiterState(
            model,
            math.floor(k),
            c.max_concurrency,
            in_flight,
            requests,
            c.requests_per_minute,
            tokens,
            c.tokens_per_minute,
            cooldown_until,
            paused,
        )


@dataclass
class _ModelState:
    """One model's state in a :class:`LocalLimiter`; times are ``time.monotonic()``."""

    k: float
    cut_at: float = -math.inf
    cool_until: float = -math.inf
    paused: Paused | None = None
    slots: dict[str, float] = field(default_factory=dict)
    """Permit id to expiry."""
    log: deque[tuple[float, str]] = field(default_factory=deque)
    """Grants in the window, oldest first."""
    tokens: dict[str, int] = field(default_factory=dict)
    """Tokens of each grant in the window."""
    strikes: deque[float] = field(default_factory=deque)
    """Times of unexplained refusals, oldest first."""


class LocalLimiter(PollingLimiter):
    """The same limits inside one process, for the embedded mode without Redis.

    Args:
        config: Limits applied to every model.
    """

    def __init__(self, config: LimitConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._models: dict[str, _ModelState] = {}

    def _model(self, model: str, now: float) -> _ModelState:
        """The model's state with expired slots and old grants dropped; hold the lock."""
        m = self._models.setdefault(model, _ModelState(k=float(self.config.max_concurrency)))
        for permit_id in [p for p, expiry in m.slots.items() if expiry <= now]:
            del m.slots[permit_id]
        while m.log and m.log[0][0] <= now - WINDOW_S:
            m.tokens.pop(m.log.popleft()[1], None)
        return m

    def _attempt(self, model: str, permit_id: str, tokens: int) -> Permit | Paused | Wait:
        c = self.config
        with self._lock:
            now = time.monotonic()
            m = self._model(model, now)
            if m.paused is not None and m.paused.until.timestamp() > time.time():
                return m.paused
            if m.cool_until > now:
                return Wait("cooldown", m.cool_until - now)
            if len(m.slots) >= math.floor(m.k):
                return Wait("concurrency", min(m.slots.values()) - now)
            if len(m.log) >= c.requests_per_minute:
                return Wait("requests", m.log[0][0] + WINDOW_S - now)
            used = sum(m.tokens.values())
            need = used + tokens - c.tokens_per_minute
            if used > 0 and need > 0:
                for granted, grant_id in m.log:
                    need -= m.tokens[grant_id]
                    if need <= 0:
                        return Wait("tokens", granted + WINDOW_S - now)
                return Wait("tokens", WINDOW_S)
            m.slots[permit_id] = now + c.slot_ttl_s
            m.log.append((now, permit_id))
            m.tokens[permit_id] = tokens
        return Permit(model=model, id=permit_id, reserved_tokens=tokens)

    def release(
        self,
        permit: Permit,
        *,
        tokens_used: int,
        outcome: Outcome,
        retry_delay_s: float | None = None,
    ) -> None:
        """See :meth:`Limiter.release`."""
        c = self.config
        with self._lock:
            now = time.monotonic()
            m = self._model(permit.model, now)
            expiry = m.slots.pop(permit.id, None)
            if permit.id in m.tokens:
                m.tokens[permit.id] = max(0, tokens_used)
            if expiry is not None and outcome is Outcome.ok:
                m.k = min(c.max_concurrency, m.k + 1 / m.k)
            cut = expiry is not None and expiry - c.slot_ttl_s > m.cut_at
            if cut and outcome is Outcome.rate_limited:
                m.k = max(c.min_concurrency, math.floor(math.floor(m.k) / 2))
                m.cut_at = now
            if outcome is Outcome.rate_limited and retry_delay_s is not None:
                m.cool_until = max(m.cool_until, now + retry_delay_s)
            k = m.k
        self._log_release(permit, outcome, k, retry_delay_s)

    def pause(self, model: str, *, until: datetime, reason: str) -> None:
        """See :meth:`Limiter.pause`."""
        if until.tzinfo is None:
            raise ValueError("until must be timezone-aware")
        with self._lock:
            m = self._model(model, time.monotonic())
            m.paused = Paused(model=model, until=until.astimezone(UTC), reason=reason)
        logger.warning("%s paused until %s: %s", model, until.isoformat(), reason)

    def strike(self, model: str, *, window_s: float) -> int:
        """See :meth:`Limiter.strike`."""
        with self._lock:
            now = time.monotonic()
            m = self._model(model, now)
            m.strikes.append(now)
            while m.strikes[0] <= now - window_s:
                m.strikes.popleft()
            return len(m.strikes)

    def state(self, model: str) -> LimiterState:
        """See :meth:`Limiter.state`."""
        with self._lock:
            now, wall_s = time.monotonic(), time.time()
            m = self._model(model, now)
            counts = (len(m.slots), len(m.log), sum(m.tokens.values()))
            cool = utc_from_epoch(wall_s + m.cool_until - now) if m.cool_until > now else None
            paused = m.paused if m.paused and m.paused.until.timestamp() > wall_s else None
            return self._report(model, m.k, counts, cool, paused)
