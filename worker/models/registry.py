"""Which model serves a session: ``sim`` offline, ``gemini-*`` through the Gemini API."""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING

import redis
from sqlalchemy import Engine

from worker.errors import ConfigError, LimiterUnavailable
from worker.models.base import Model, ModelRequest
from worker.models.gemini.cache import RunCache, drop_ended
from worker.models.limiter.base import LimitConfig, Limiter, LimiterState, LocalLimiter
from worker.models.limiter.redis import RedisLimiter
from worker.models.pricing import PriceTable
from worker.settings import Settings
from worker.store.engine import utcnow

if TYPE_CHECKING:
    from google import genai

    from worker.models.gemini.client import CachedPrefix

#: Model name of the offline stand-in.
SIM = "sim"
#: Prefix of the models the Gemini API serves.
GEMINI_PREFIX = "gemini-"


def check_model(model: str, prices: PriceTable) -> None:
    """Refuse, at enqueue time, a model no provider serves or no price covers.

    Raises:
        ConfigError: with what would work instead.
    """
    if model != SIM and not model.startswith(GEMINI_PREFIX):
        raise ConfigError(
            f"no provider serves model {model!r}; use {SIM!r} or a {GEMINI_PREFIX}* model"
        )
    prices.price(model)


class Providers:
    """The model clients of one process: one Gemini client and one limiter, shared.

    Args:
        settings: The process's settings.
        engine: The database, where a run's explicit cache is recorded.
        prices: The price table a budgeted run's cache storage is counted at.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        engine: Engine | None = None,
        prices: PriceTable | None = None,
    ) -> None:
        self.settings = settings
        self.engine = engine
        self.prices = prices
        self._lock = threading.Lock()

    def model_for(
        self, name: str, *, run_id: int, explicit_cache: bool, sim: Callable[[], Model]
    ) -> Model:
        """The model ``name`` of a session of run ``run_id``.

        Args:
            name: ``sim`` or a ``gemini-*`` model.
            run_id: The session's run (an explicit context cache is the run's).
            explicit_cache: The run keeps its prompt prefix in one explicit cache.
            sim: Makes the session's sim model (its player is the session's task's).

        Raises:
            ConfigError: no provider serves that model, or the Gemini API key is missing.
        """
        if name == SIM:
            return sim()
        if name.startswith(GEMINI_PREFIX):
            # Imported here, as in the methods below: google-genai costs a process about
            # 40 MiB, and a worker that serves only sim sessions never loads it.
            from worker.models.gemini.client import GeminiModel

            s = self.settings
            return GeminiModel(
                client=self.client,
                limiter=self.limiter,
                thinking_level=s.thinking_level,
                thinking_budget=s.thinking_budget,
                wait_s=s.limiter_wait_s,
                cache=self._run_cache(run_id) if explicit_cache else None,
            )
        raise ConfigError(f"no provider serves model {name!r}")

    def check_ready(self, model: str) -> None:
        """Refuse, before a run is made here, a model this process could not call.

        Raises:
            ConfigError: a Gemini model without an API key in this process's environment.
        """
        if model.startswith(GEMINI_PREFIX):
            self._api_key()

    def _api_key(self) -> str:
        key = self.settings.gemini_api_key
        if key is None or not key.get_secret_value():
            raise ConfigError(
                "no Gemini API key: set GEMINI_API_KEY (or GOOGLE_API_KEY) "
                "in the worker's environment"
            )
        return key.get_secret_value()

    @cached_property
    def client(self) -> genai.Client:
        """The Gemini client, built on first use and shared by every turn of the process."""
        key = self._api_key()
        from worker.models.gemini.client import make_client

        with self._lock:
            return make_client(
                api_key=key,
                base_url=self.settings.gemini_base_url,
                timeout_s=self.settings.gemini_timeout_s,
            )

    @cached_property
    def limiter(self) -> Limiter:
        """The fleet-wide limiter: in Redis with a Redis broker, in-process otherwise."""
        s = self.settings
        config = LimitConfig(
            max_concurrency=s.model_concurrency,
            requests_per_minute=s.model_rpm,
            tokens_per_minute=s.model_tpm,
            slot_ttl_s=s.gemini_timeout_s + s.limiter_wait_s + 30,
        )
        if s.is_redis_broker:
            client = redis.Redis.from_url(s.broker_url, socket_timeout=5, socket_connect_timeout=5)
            return RedisLimiter(client, config, prefix=s.limiter_prefix)
        return LocalLimiter(config)

    def _run_cache(self, run_id: int) -> RunCache:
        if self.engine is None:
            raise ConfigError("an explicit context cache needs the database")
        return RunCache(
            engine=self.engine,
            run_id=run_id,
            create=self._create_cache,
            clock=utcnow,
            prices=self.prices,
            ttl_s=self.settings.cache_ttl_s,
        )

    def _create_cache(self, request: ModelRequest, display_name: str) -> CachedPrefix:
        from worker.models.gemini.client import create_cache

        return create_cache(
            self.client,
            model=request.model,
            system_instruction=request.system_instruction,
            tools=request.tools,
            tool_mode=request.tool_mode,
            ttl_s=self.settings.cache_ttl_s,
            display_name=display_name,
        )

    def release_ended_runs(self) -> int:
        """Free what providers hold for runs that have ended (explicit caches); how many."""
        if self.engine is None:
            return 0
        return drop_ended(self.engine, delete=self.delete_cache, now=utcnow())

    def delete_cache(self, name: str) -> None:
        """Delete an explicit cache at the Gemini API."""
        from worker.models.gemini.client import delete_cache

        delete_cache(self.client, name)

    def limiter_status(self, model: str) -> LimiterState | str:
        """The fleet limiter's state for ``model`` (for ``status``), or why it is unknown."""
        try:
            return self.limiter.state(model)
        except LimiterUnavailable as exc:
            return str(exc)
