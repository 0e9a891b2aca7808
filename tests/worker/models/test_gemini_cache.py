"""A run's explicit cache that expires or vanishes is made again, once, and the turn goes on."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta

import pytest
from sqlalchemy import Engine, select

from ops.fake_gemini import FakeGemini
from tests.factories import make_run
from tests.worker.models.test_gemini import CANARY, _request
from worker.models.base import ModelRequest, prompt_tokens_bound
from worker.models.gemini.cache import RunCache
from worker.models.gemini.client import CachedPrefix, GeminiModel, create_cache, make_client
from worker.models.limiter.base import LimitConfig, LocalLimiter
from worker.models.pricing import PriceTable
from worker.store.engine import utcnow
from worker.store.tables import caches, runs

pytestmark = pytest.mark.services

MODEL = "gemini-3-flash-preview"


class Clock:
    """The current time, which a test may move on."""

    def __init__(self) -> None:
        self.shift = timedelta(0)

    def __call__(self) -> datetime:
        return utcnow() + self.shift


def _provider(engine: Engine, fake: FakeGemini, run_id: int, clock: Clock) -> GeminiModel:
    """What a worker builds for one turn of the run: its own client, limiter and cache handle."""
    client = make_client(api_key=CANARY, base_url=fake.url, timeout_s=5.0)

    def create(request: ModelRequest, display_name: str) -> CachedPrefix:
        return create_cache(
            client,
            model=request.model,
            system_instruction=request.system_instruction,
            tools=request.tools,
            tool_mode=request.tool_mode,
            ttl_s=3600,
            display_name=display_name,
        )

    cache = RunCache(engine=engine, run_id=run_id, create=create, clock=clock)
    return GeminiModel(client=client, limiter=LocalLimiter(LimitConfig()), wait_s=5.0, cache=cache)


def _row(engine: Engine, run_id: int) -> tuple[str, datetime | None, datetime | None]:
    """The run's newest cache: name, expiry and deletion."""
    with engine.connect() as conn:
        name, expires_at, deleted_at = conn.execute(
            select(caches.c.name, caches.c.expires_at, caches.c.deleted_at)
            .where(caches.c.run_id == run_id)
            .order_by(caches.c.id.desc())
            .limit(1)
        ).one()
    return str(name), expires_at, deleted_at


def _names(engine: Engine, run_id: int) -> list[str]:
    """Every cache the run made, oldest first: each keeps its row, for its storage."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(caches.c.name).where(caches.c.run_id == run_id).order_by(caches.c.id)
        )
        return [str(name) for name in rows.scalars()]


def test_an_evicted_cache_is_made_again_and_the_turn_goes_on(
    engine: Engine, fake_gemini: Callable[..., FakeGemini]
) -> None:
    # Given a run whose first turn cached its prefix
    fake = fake_gemini()
    run_id, _ = make_run(engine, model=MODEL, cache="explicit")
    model = _provider(engine, fake, run_id, Clock())
    assert model.generate(_request()).calls
    first, _, _ = _row(engine, run_id)
    # When the API drops the cache before its time
    fake.caches.evict(first)
    turn = model.generate(_request())
    # Then the API's 403 made the provider cache the prefix again and send the turn again
    assert turn.calls
    assert [s.status for s in fake.served] == [200, 403, 200]
    name, _, deleted_at = _row(engine, run_id)
    assert fake.caches.created == 2 and name != first and deleted_at is None
    assert fake.served[-1].cache == name
    assert _names(engine, run_id) == [first, name]


def test_sessions_that_find_the_cache_gone_together_make_one_new_cache(
    engine: Engine, fake_gemini: Callable[..., FakeGemini]
) -> None:
    # Given a run's cache, and six sessions on their own workers
    fake = fake_gemini()
    run_id, _ = make_run(engine, model=MODEL, cache="explicit")
    models = [_provider(engine, fake, run_id, Clock()) for _ in range(6)]
    assert models[0].generate(_request()).calls
    first, _, _ = _row(engine, run_id)
    fake.caches.evict(first)
    # When all six take a turn at once
    start = threading.Barrier(len(models))
    failures: list[BaseException] = []

    def turn(model: GeminiModel) -> None:
        start.wait()
        try:
            assert model.generate(_request()).calls
        except BaseException as exc:  # reported below, with the thread's own traceback
            failures.append(exc)

    threads = [threading.Thread(target=turn, args=(m,)) for m in models]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    # Then every turn went on, and the run got exactly one new cache
    assert failures == []
    assert fake.caches.created == 2
    name, _, _ = _row(engine, run_id)
    assert {s.cache for s in fake.served if s.status == 200} == {first, name}
    assert _names(engine, run_id) == [first, name]


def test_a_cache_past_its_expiry_is_made_again_before_any_request_names_it(
    engine: Engine, fake_gemini: Callable[..., FakeGemini]
) -> None:
    # Given a run's cache, and a clock that has moved on to a minute before it expires
    fake = fake_gemini()
    clock = Clock()
    run_id, _ = make_run(engine, model=MODEL, cache="explicit")
    model = _provider(engine, fake, run_id, clock)
    assert model.generate(_request()).calls
    first, expires_at, _ = _row(engine, run_id)
    assert expires_at is not None
    clock.shift = expires_at - utcnow() - timedelta(minutes=1)
    # When the next turn is taken
    assert model.generate(_request()).calls
    # Then it named a new cache: no request went out with one about to expire
    name, later, deleted_at = _row(engine, run_id)
    assert name != first and deleted_at is None and later is not None and later > expires_at
    assert fake.caches.created == 2
    assert [s.status for s in fake.served] == [200, 200]
    assert _names(engine, run_id) == [first, name]


def _short_lived(
    engine: Engine, fake: FakeGemini, run_id: int, clock: Clock, *, dated: bool
) -> GeminiModel:
    """A provider whose caches the API keeps for 60 s, inside the expiry margin; or, not
    ``dated`` (no createTime), whose caches' expireTime is already past by this clock."""
    model = _provider(engine, fake, run_id, clock)
    assert model.cache is not None
    make = model.cache.create

    def create(request: ModelRequest, display_name: str) -> CachedPrefix:
        made = make(request, display_name)
        assert made.created_at is not None
        if not dated:
            return CachedPrefix(made.name, made.tokens, clock() - timedelta(seconds=1))
        return CachedPrefix(
            made.name, made.tokens, made.created_at + timedelta(seconds=60), made.created_at
        )

    model.cache.create = create
    return model


@pytest.mark.parametrize("dated", [True, False], ids=["lives 60 s", "already past, undated"])
def test_a_cache_made_to_expire_within_the_margin_is_never_named(
    engine: Engine, fake_gemini: Callable[..., FakeGemini], dated: bool
) -> None:
    # Given a run whose provider keeps its caches for less than the margin
    fake = fake_gemini()
    run_id, _ = make_run(engine, model=MODEL, cache="explicit")
    clock = Clock()
    model = _short_lived(engine, fake, run_id, clock, dated=dated)
    # When three turns are called
    turns = [model.generate(_request(model=MODEL)) for _ in range(3)]
    # Then each went through with its prefix, none named the cache, and only one was made
    assert all(t.content["parts"] for t in turns)
    assert [s.cache for s in fake.served] == [None, None, None]
    assert len(_names(engine, run_id)) == 1


def test_a_skewed_clock_keeps_the_cache_the_api_made(
    engine: Engine, fake_gemini: Callable[..., FakeGemini]
) -> None:
    # Given a worker whose clock runs 58 minutes ahead of the API's (a cache of an hour
    # would look two minutes from its end by the API's expireTime)
    fake = fake_gemini()
    run_id, _ = make_run(engine, model=MODEL, cache="explicit")
    clock = Clock()
    clock.shift = timedelta(minutes=58)
    model = _provider(engine, fake, run_id, clock)
    # When two turns are called
    for _ in range(2):
        model.generate(_request(model=MODEL))
    # Then both named the one cache, whose expiry is an hour on this worker's clock
    names = _names(engine, run_id)
    assert len(names) == 1 and [s.cache for s in fake.served] == names * 2
    _, expires_at, _ = _row(engine, run_id)
    assert expires_at is not None and expires_at - clock() > timedelta(minutes=59)


def test_a_cache_ttl_within_the_margin_is_refused_at_start_up() -> None:
    import subprocess
    import sys

    from tests.conftest import ROOT
    from worker.settings import Settings

    with pytest.raises(ValueError, match="must be more than 120 s"):
        Settings(cache_ttl_s=60)
    started = subprocess.run(
        [sys.executable, "-m", "worker", "-Q", "sessions"],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "SWARM_CACHE_TTL_S": "60"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode != 0
    assert started.stderr.strip().splitlines()[-1].startswith("error: SWARM_CACHE_TTL_S: must")
    assert "Traceback" not in started.stderr


@pytest.mark.parametrize("fits", [True, False])
def test_a_budgeted_run_pays_for_its_cache_through_the_budget(engine: Engine, fits: bool) -> None:
    # Given a budgeted run whose prefix would cost `worst` to keep for the cache's lifetime
    prices = PriceTable.load()
    request = _request(model=MODEL)
    ttl_s = 3600.0
    worst = prices.storage_usd(
        MODEL, tokens=prompt_tokens_bound(replace(request, history=())), hours=ttl_s / 3600
    )
    budget = worst * 4 if fits else worst * 0.5
    run_id, _ = make_run(engine, model=MODEL, cache="explicit", budget_usd=budget)
    made: list[str] = []

    def create(req: ModelRequest, display_name: str) -> CachedPrefix:
        made.append(display_name)
        now = utcnow()
        return CachedPrefix("cachedContents/c1", 900, now + timedelta(seconds=ttl_s), now)

    cache = RunCache(
        engine=engine, run_id=run_id, create=create, clock=utcnow, prices=prices, ttl_s=ttl_s
    )
    # When a turn asks for the run's cache
    name = cache.name_for(request)
    with engine.connect() as conn:
        spent = conn.execute(select(runs.c.spent_usd).where(runs.c.id == run_id)).scalar_one()
    if fits:
        # Then it was made, and its storage for its lifetime is spent on the run's ledger
        assert name == "cachedContents/c1" and len(made) == 1
        assert spent == pytest.approx(prices.storage_usd(MODEL, tokens=900, hours=1.0))
    else:
        # Then a cache the budget cannot pay for is never made: the prefix goes with each
        # request, and nothing is spent
        assert name is None and made == [] and spent == 0.0
