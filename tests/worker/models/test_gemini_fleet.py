"""Whole runs on ``gemini-*`` models: a real worker, the real SDK, the fake Gemini API."""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from collections.abc import Callable

import pytest
import redis
from click.testing import CliRunner
from sqlalchemy import Engine, select

from ops.fake_gemini import FakeGemini, Fault, FaultRule
from scheduler.cli import cli
from scheduler.cli.follow import until_finished
from tests.conftest import WorkerProcess
from tests.factories import duplicates, enqueue
from worker.models.pricing import PriceTable
from worker.settings import Settings
from worker.store.tables import caches, sessions, usage

pytestmark = [pytest.mark.services, pytest.mark.slow]

MODEL = "gemini-3-flash-preview"
#: Seconds any whole run in these tests may take.
RUN_TIMEOUT_S = 120


def _worker(
    start_worker: Callable[..., WorkerProcess], fake: FakeGemini, key: str = "test-key"
) -> WorkerProcess:
    return start_worker(SWARM_GEMINI_BASE_URL=fake.url, GEMINI_API_KEY=key)


def _outcomes(engine: Engine, run_id: int) -> list[tuple[str, str | None]]:
    with engine.connect() as conn:
        rows = conn.execute(
            select(sessions.c.status, sessions.c.outcome)
            .where(sessions.c.run_id == run_id)
            .order_by(sessions.c.index)
        )
        return [(status, outcome) for status, outcome in rows]


def test_2x3_run_through_the_sdk_is_priced(
    settings: Settings,
    engine: Engine,
    start_worker: Callable[..., WorkerProcess],
    fake_gemini: Callable[..., FakeGemini],
) -> None:
    # Given a worker whose Gemini client points at the fake API
    fake = fake_gemini()
    worker = _worker(start_worker, fake)
    # When a 2x3 run on gemini-3-flash-preview is followed to its end
    run_id = enqueue(settings, "--wave", "2x3", model=MODEL, seed=11)
    status = until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
    # Then all six sessions succeeded, every request accepted: thought signatures
    # survived the history rebuilt from the event log on whichever thread took the turn
    assert status.sessions.succeeded == 6, _outcomes(engine, run_id)
    assert {s.status for s in fake.served} == {200}
    assert len(fake.served) == status.turns
    # and every kind of token was counted, and priced from the table
    tokens = status.tokens
    assert tokens.prompt > tokens.cached > 0 and tokens.output > 0
    assert tokens.thoughts > 0
    price = PriceTable.load().price(MODEL)
    expected = (
        (tokens.prompt - tokens.cached) * price.input_per_m
        + tokens.cached * price.cached_input_per_m
        + (tokens.output + tokens.thoughts) * price.output_per_m
    ) / 1e6
    assert status.cost_usd == pytest.approx(expected, abs=1e-6)
    with engine.connect() as conn:
        models = set(conn.execute(select(usage.c.model)).scalars())
    assert models == {MODEL}
    assert duplicates(engine) == {"usage": 0, "model_events": 0, "version_gaps": 0}
    assert worker.errors() == []


def test_a_429_retry_delay_is_honoured(
    settings: Settings,
    engine: Engine,
    start_worker: Callable[..., WorkerProcess],
    fake_gemini: Callable[..., FakeGemini],
) -> None:
    # Given the API answers the third request with a 429 asking for 2 s
    fake = fake_gemini(faults=[FaultRule(Fault.rate_minute, after=2, retry_delay_s=2.0)])
    _worker(start_worker, fake)
    # When a one-session run goes through it
    run_id = enqueue(settings, "--wave", "1x1", model=MODEL, seed=11)
    status = until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
    # Then the session succeeded, and the retry came no sooner than 2 s later
    assert status.sessions.succeeded == 1
    served = fake.served
    limited = next(i for i, s in enumerate(served) if s.status == 429)
    assert served[limited + 1].turn == served[limited].turn
    assert served[limited + 1].at - served[limited].at >= 2.0
    assert duplicates(engine) == {"usage": 0, "model_events": 0, "version_gaps": 0}


def test_a_daily_quota_stops_the_fleet_without_retries(
    settings: Settings,
    engine: Engine,
    start_worker: Callable[..., WorkerProcess],
    fake_gemini: Callable[..., FakeGemini],
) -> None:
    # Given the API reports the per-day quota spent on its fifth request
    fake = fake_gemini(faults=[FaultRule(Fault.rate_day, after=4)])
    _worker(start_worker, fake)
    # When a 2x3 run goes through it
    run_id = enqueue(settings, "--wave", "2x3", model=MODEL, seed=11)
    status = until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
    # Then every session ended; those cut short are stopped with the quota as reason
    outcomes = _outcomes(engine, run_id)
    assert status.sessions.total == 6 and status.finished_at is not None
    assert ("stopped", "quota") in outcomes
    assert {s for s, _ in outcomes} <= {"succeeded", "stopped"}
    # and nobody retried: one 429, and only calls already in flight came after it
    served = fake.served
    assert [s.status for s in served].count(429) == 1
    limited = next(i for i, s in enumerate(served) if s.status == 429)
    assert len(served) - limited - 1 <= 2
    with engine.connect() as conn:
        reasons = (
            conn.execute(
                select(sessions.c.error).where(
                    sessions.c.run_id == run_id, sessions.c.outcome == "quota"
                )
            )
            .scalars()
            .all()
        )
    assert reasons and all("PerDay" in r for r in reasons)


def test_server_faults_end_every_session_in_a_recorded_state(
    settings: Settings,
    engine: Engine,
    start_worker: Callable[..., WorkerProcess],
    fake_gemini: Callable[..., FakeGemini],
) -> None:
    # Given an API that fails a share of requests: 500, 503, truncated bodies, and hangs
    fake = fake_gemini(
        faults=[
            FaultRule(Fault.hang, times=2, after=3),
            FaultRule(Fault.internal, times=None, rate=0.1),
            FaultRule(Fault.unavailable, times=None, rate=0.1),
            FaultRule(Fault.truncate, times=None, rate=0.1),
        ]
    )
    fake.hang_s = 30.0
    worker = _worker(start_worker, fake)
    # When a 2x3 run goes through it
    run_id = enqueue(settings, "--wave", "2x3", model=MODEL, seed=11)
    status = until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
    # Then every fault fired, every session ended, and no turn was committed twice
    assert set(fake.faults.fired) == {"hang", "500", "503", "truncate"}, fake.faults.fired
    assert status.sessions.total == 6 and status.finished_at is not None
    assert {s for s, _ in _outcomes(engine, run_id)} <= {"succeeded", "error"}
    assert status.sessions.succeeded >= 4
    assert duplicates(engine) == {"usage": 0, "model_events": 0, "version_gaps": 0}
    assert worker.errors() == []


def test_the_api_key_never_leaks(
    settings: Settings,
    engine: Engine,
    start_worker: Callable[..., WorkerProcess],
    fake_gemini: Callable[..., FakeGemini],
    redis_url: str,
) -> None:
    # Given a worker holding a canary key
    canary = "canary-7d1e0b9a5c"
    fake = fake_gemini()
    worker = _worker(start_worker, fake, key=canary)
    # When a run goes through the API with it, and its status is printed
    run_id = enqueue(settings, "--wave", "1x2", model=MODEL, seed=11)
    until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
    printed = (
        CliRunner()
        .invoke(
            cli,
            [
                "--database-url",
                settings.database_url,
                "status",
                str(run_id),
                "--json",
                "--sessions",
            ],
        )
        .output
    )
    # Then the API saw the key on every request
    assert {s.key_sha256 for s in fake.served} == {hashlib.sha256(canary.encode()).hexdigest()}
    # but it is in no log line, no row of the database, no status and nothing in Redis
    worker.stop()
    assert canary not in "\n".join(worker.log)
    dump = subprocess.run(
        [
            "pg_dump",
            "--data-only",
            settings.database_url.replace("postgresql+psycopg", "postgresql"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "dashboard.html" in dump.stdout and canary not in dump.stdout
    assert json.loads(printed)["sessions"]["total"] == 2 and canary not in printed
    client = redis.Redis.from_url(redis_url)
    for key in client.scan_iter():
        kind = client.type(key)
        value = client.dump(key) or b""
        assert canary.encode() not in key + value, (key, kind)


def test_an_explicit_cache_serves_the_run_and_goes_with_it(
    settings: Settings,
    engine: Engine,
    start_worker: Callable[..., WorkerProcess],
    fake_gemini: Callable[..., FakeGemini],
) -> None:
    # Given a worker and the fake API
    fake = fake_gemini()
    _worker(start_worker, fake)
    # When a 2x3 run asks for an explicit cache of its prefix
    run_id = enqueue(settings, "--wave", "2x3", "--cache", "explicit", model=MODEL, seed=11)
    status = until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
    # Then one cache was created for the whole run and named by every request, which
    # therefore left the prefix out (the API refuses both at once)
    assert status.sessions.succeeded == 6, _outcomes(engine, run_id)
    assert fake.caches.created == 1
    names = {s.cache for s in fake.served}
    assert len(names) == 1 and None not in names
    assert {s.status for s in fake.served} == {200}
    with engine.connect() as conn:
        row = conn.execute(select(caches).where(caches.c.run_id == run_id)).one()
    assert row.name in names and row.tokens > 0
    # and once the run has ended a reconciler pass deletes it
    deadline = time.monotonic() + 30
    while fake.caches.deleted == 0 and time.monotonic() < deadline:
        time.sleep(0.1)  # bounded wait for the next reconciler pass (every 0.5 s here)
    assert (fake.caches.deleted, len(fake.caches)) == (1, 0)
    with engine.connect() as conn:
        assert (
            conn.execute(select(caches.c.deleted_at).where(caches.c.run_id == run_id)).scalar()
            is not None
        )
    assert duplicates(engine) == {"usage": 0, "model_events": 0, "version_gaps": 0}


def test_429s_naming_no_quota_cool_the_fleet_then_stop_it_for_the_quota(
    settings: Settings,
    engine: Engine,
    start_worker: Callable[..., WorkerProcess],
    fake_gemini: Callable[..., FakeGemini],
) -> None:
    # Given the API lets two requests through, then answers every one with a 429 that
    # names no quota (only a google.rpc.Help detail), as a spent daily quota does
    fake = fake_gemini(faults=[FaultRule(Fault.rate_help, times=None, after=2)])
    _worker(start_worker, fake)
    # When a one-wave run of two sessions goes through it
    run_id = enqueue(settings, "--wave", "1x2", model=MODEL, seed=11)
    status = until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
    # Then both sessions ended stopped for the quota, not in error
    assert status.finished_at is not None
    assert _outcomes(engine, run_id) == [("stopped", "quota"), ("stopped", "quota")]
    # and the fleet waited out a cool-down between the first 429 and the ones after it
    limited = [s for s in fake.served if s.status == 429]
    assert 3 <= len(limited) <= 4
    assert limited[-1].at - limited[0].at >= 25.0
