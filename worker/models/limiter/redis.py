"""The fleet-wide limiter in Redis: Lua scripts deciding on Redis's own clock.

Every worker on every host shares one limit per model; the state lives under
``<prefix>:<model>:`` and expires when the model goes unused. See :mod:`worker.models.limiter.base`.
"""

from __future__ import annotations

import logging
import math
from datetime import datetime
from typing import Any
from uuid import uuid4

import redis

from worker.errors import LimiterUnavailable
from worker.models.limiter.base import (
    IDLE_TTL_S,
    UNREACHABLE_DELAY_S,
    WINDOW_S,
    LimitConfig,
    LimiterState,
    Outcome,
    Paused,
    Permit,
    PollingLimiter,
    Wait,
    utc_from_epoch,
)

logger = logging.getLogger(__name__)

# KEYS: slots (id -> expiry), log (id -> grant time), tokens (id -> tokens), used (sum of
# tokens), aimd (k, cut_at), cool (not-before time), pause (until, reason).
# ARGV 1-7: max K, min K, requests/min, tokens/min, slot ttl, window, idle ttl.
_PRELUDE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local max_k, min_k, window = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[6])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - window)
if #old > 0 then
  local freed = 0
  for _, id in ipairs(old) do
    freed = freed + tonumber(redis.call('HGET', KEYS[3], id) or '0')
    redis.call('HDEL', KEYS[3], id)
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
  if redis.call('DECRBY', KEYS[4], freed) < 0 then redis.call('SET', KEYS[4], 0) end
end
local k = tonumber(redis.call('HGET', KEYS[5], 'k') or ARGV[1])
k = math.max(min_k, math.min(max_k, k))
local function touch()
  for i = 1, 5 do redis.call('EXPIRE', KEYS[i], ARGV[7]) end
end
"""
# ARGV 8-9: permit id, tokens.
_ACQUIRE = (
    _PRELUDE
    + """
local p = redis.call('HMGET', KEYS[7], 'until', 'reason')
if p[1] and tonumber(p[1]) > now then return {'paused', p[1], p[2]} end
local cool = tonumber(redis.call('GET', KEYS[6]) or '0')
if cool > now then return {'cooldown', tostring(cool - now)} end
if redis.call('ZCARD', KEYS[1]) >= math.floor(k) then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {'concurrency', tostring(tonumber(first[2]) - now)}
end
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[3]) then
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  return {'requests', tostring(tonumber(first[2]) + window - now)}
end
local want = tonumber(ARGV[9])
local used = tonumber(redis.call('GET', KEYS[4]) or '0')
local need = used + want - tonumber(ARGV[4])
if used > 0 and need > 0 then
  local log = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
  for i = 1, #log, 2 do
    need = need - tonumber(redis.call('HGET', KEYS[3], log[i]) or '0')
    if need <= 0 then return {'tokens', tostring(tonumber(log[i + 1]) + window - now)} end
  end
  return {'tokens', tostring(window)}
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[5]), ARGV[8])
redis.call('ZADD', KEYS[2], now, ARGV[8])
redis.call('HSET', KEYS[3], ARGV[8], want)
redis.call('INCRBY', KEYS[4], want)
redis.call('HSET', KEYS[5], 'k', tostring(k))
touch()
return {'ok'}
"""
)
# ARGV 8-11: permit id, tokens used, outcome, retry delay ('' for none).
_RELEASE = (
    _PRELUDE
    + """
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[8])
redis.call('ZREM', KEYS[1], ARGV[8])
local reserved = redis.call('HGET', KEYS[3], ARGV[8])
if reserved then
  redis.call('HSET', KEYS[3], ARGV[8], ARGV[9])
  redis.call('INCRBY', KEYS[4], tonumber(ARGV[9]) - tonumber(reserved))
end
if expiry and ARGV[10] == 'ok' then
  k = math.min(max_k, k + 1 / k)
elseif expiry and ARGV[10] == 'rate_limited' then
  -- One cut per burst: a 429 on a call granted before the last cut says nothing new.
  local cut = tonumber(redis.call('HGET', KEYS[5], 'cut_at') or '0')
  if tonumber(expiry) - tonumber(ARGV[5]) > cut then
    k = math.max(min_k, math.floor(math.floor(k) / 2))
    redis.call('HSET', KEYS[5], 'cut_at', tostring(now))
  end
end
redis.call('HSET', KEYS[5], 'k', tostring(k))
if ARGV[10] == 'rate_limited' and ARGV[11] ~= '' then
  local cool = now + tonumber(ARGV[11])
  if cool > tonumber(redis.call('GET', KEYS[6]) or '0') then
    redis.call('SET', KEYS[6], tostring(cool), 'PX', math.ceil(tonumber(ARGV[11]) * 1000))
  end
end
touch()
return {tostring(k)}
"""
)
_STATE = (
    _PRELUDE
    + """
local p = redis.call('HMGET', KEYS[7], 'until', 'reason')
return {tostring(k), redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2]),
        redis.call('GET', KEYS[4]) or '0', redis.call('GET', KEYS[6]) or '0',
        p[1] or '0', p[2] or '', tostring(now)}
"""
)


# KEYS: strikes (id -> time). ARGV: window, id.
_STRIKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local window = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
redis.call('ZADD', KEYS[1], now, ARGV[2])
redis.call('EXPIRE', KEYS[1], math.ceil(window))
return redis.call('ZCARD', KEYS[1])
"""


class RedisLimiter(PollingLimiter):
    """The limiter shared by every worker through one Redis, deciding on Redis's clock.

    Args:
        client: Redis connection (either ``decode_responses`` setting works).
        config: Limits applied to every model.
        prefix: Key prefix; a model's keys are ``<prefix>:<model>:<name>``.
    """

    def __init__(self, client: redis.Redis, config: LimitConfig, prefix: str = "swarm:limit"):
        self.client, self.config, self.prefix = client, config, prefix
        self._acquire = client.register_script(_ACQUIRE)
        self._release = client.register_script(_RELEASE)
        self._state = client.register_script(_STATE)
        self._strike = client.register_script(_STRIKE)

    def keys(self, model: str) -> list[str]:
        """Every Redis key that holds ``model``'s state."""
        names = ("slots", "log", "tokens", "used", "aimd", "cool", "pause")
        return [f"{self.prefix}:{model}:{name}" for name in names]

    def strike(self, model: str, *, window_s: float) -> int:
        """See :meth:`Limiter.strike`; counted on Redis's clock."""
        key = f"{self.prefix}:{model}:strikes"
        try:
            got = self._strike(keys=[key], args=[window_s, uuid4().hex], client=self.client)
        except redis.RedisError as exc:
            message = f"rate limiter for {model} cannot reach Redis: {exc}"
            raise LimiterUnavailable(message, delay_s=UNREACHABLE_DELAY_S) from exc
        return int(got)

    def _run(self, script: Any, model: str, *args: object) -> list[str]:
        c = self.config
        idle_ttl_s = max(IDLE_TTL_S, math.ceil(c.slot_ttl_s) * 2)
        limits = (c.max_concurrency, c.min_concurrency, c.requests_per_minute, c.tokens_per_minute)
        argv = [*limits, c.slot_ttl_s, WINDOW_S, idle_ttl_s, *args]
        try:
            got = script(keys=self.keys(model), args=argv, client=self.client)
        except redis.RedisError as exc:
            message = f"rate limiter for {model} cannot reach Redis: {exc}"
            raise LimiterUnavailable(message, delay_s=UNREACHABLE_DELAY_S) from exc
        return [v.decode() if isinstance(v, bytes) else str(v) for v in got]

    def _attempt(self, model: str, permit_id: str, tokens: int) -> Permit | Paused | Wait:
        got = self._run(self._acquire, model, permit_id, tokens)
        if got[0] == "ok":
            return Permit(model=model, id=permit_id, reserved_tokens=tokens)
        if got[0] == "paused":
            return Paused(model=model, until=utc_from_epoch(float(got[1])), reason=got[2])
        return Wait(got[0], max(0.0, float(got[1])))

    def release(
        self,
        permit: Permit,
        *,
        tokens_used: int,
        outcome: Outcome,
        retry_delay_s: float | None = None,
    ) -> None:
        """See :meth:`Limiter.release`."""
        delay = "" if retry_delay_s is None else repr(max(0.0, retry_delay_s))
        (k,) = self._run(
            self._release, permit.model, permit.id, max(0, tokens_used), outcome.value, delay
        )
        self._log_release(permit, outcome, float(k), retry_delay_s)

    def pause(self, model: str, *, until: datetime, reason: str) -> None:
        """See :meth:`Limiter.pause`."""
        if until.tzinfo is None:
            raise ValueError("until must be timezone-aware")
        key = self.keys(model)[-1]
        try:
            with self.client.pipeline(transaction=True) as pipe:
                pipe.hset(key, mapping={"until": repr(until.timestamp()), "reason": reason})
                pipe.pexpireat(key, math.ceil(until.timestamp() * 1000))
                pipe.execute()
        except redis.RedisError as exc:
            message = f"cannot pause {model}: Redis unreachable: {exc}"
            raise LimiterUnavailable(message, delay_s=UNREACHABLE_DELAY_S) from exc
        logger.warning("%s paused until %s: %s", model, until.isoformat(), reason)

    def state(self, model: str) -> LimiterState:
        """See :meth:`Limiter.state`; times are on Redis's clock."""
        k, in_flight, requests, used, cool, until, reason, now = self._run(self._state, model)
        live = float(now)
        return self._report(
            model,
            float(k),
            (int(in_flight), int(requests), int(used)),
            utc_from_epoch(float(cool)) if float(cool) > live else None,
            Paused(model, utc_from_epoch(float(until)), reason) if float(until) > live else None,
        )
