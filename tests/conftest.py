"""Shared fixtures: real PostgreSQL, real Redis, real Celery workers.

Locally a missing service skips the tests that need it; in CI (``CI`` set) it fails them.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from sqlalchemy import Engine, text

from ops.fake_gemini import FakeGemini, FaultRule, SimConfig
from worker.fleet.runtime import Runtime
from worker.settings import Settings
from worker.store.due import Dispatch
from worker.store.engine import make_engine, migrate
from worker.store.tables import metadata

PG_ADMIN_URL = os.environ.get("TEST_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/9")
ROOT = Path(__file__).resolve().parent.parent
#: Seconds a test waits for a worker to come up.
WORKER_READY_TIMEOUT_S = 60


def _unavailable(what: str, exc: Exception) -> None:
    if os.environ.get("CI"):
        raise RuntimeError(f"{what} is required in CI: {exc}") from exc
    pytest.skip(f"{what} unreachable: {exc}")


@pytest.fixture(autouse=True)
def _clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("SWARM_", "OTEL_")) or name in ("GEMINI_API_KEY", "GOOGLE_API_KEY"):
            monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database at the latest revision, dropped afterwards."""
    name = f"swarm_test_{secrets.token_hex(4)}"
    try:
        admin = psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        _unavailable("PostgreSQL", exc)
    admin.execute(f'CREATE DATABASE "{name}"')
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    migrate(Settings(database_url=url).database_url)
    yield url
    admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    admin.close()


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A Redis database for the tests' broker, flushed before and after."""
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=5)
    try:
        client.flushdb()
    except redis.RedisError as exc:
        _unavailable("Redis", exc)
    yield REDIS_URL
    client.flushdb()


@pytest.fixture
def settings(pg_url: str, redis_url: str) -> Iterator[Settings]:
    """Settings against the test services, with short timings; tables emptied afterwards."""
    # Short timings so that faults heal quickly; a frame-rate floor that a busy test
    # machine still reaches (the frame-rate check itself is tested on the page corpus).
    yield Settings(
        database_url=pg_url,
        broker_url=redis_url,
        lease_ttl_s=30,
        redispatch_after_s=3,
        reconcile_interval_s=0.5,
        retry_backoff_s=0.2,
        verify_min_fps=10,
        gemini_timeout_s=5,
        limiter_wait_s=5,
        limiter_prefix=f"swarm:test:{secrets.token_hex(4)}:limit",
    )
    engine = make_engine(Settings(database_url=pg_url))
    with engine.begin() as conn:
        # The fleet's identity outlives every test, as it outlives every run.
        tables = ", ".join(t.name for t in metadata.sorted_tables if t.name != "fleet")
        conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))
    engine.dispose()
    # The ids start again, so a message the test left on the broker (a held first turn
    # that its stopped worker handed back) would name the next test's sessions.
    with redis.Redis.from_url(redis_url, socket_connect_timeout=5) as client:
        client.flushdb()


@pytest.fixture
def engine(settings: Settings) -> Iterator[Engine]:
    """An engine on the test database."""
    engine = make_engine(settings)
    yield engine
    engine.dispose()


class RecordingDispatcher:
    """Keeps what would have been sent, for tests that drive turns by hand."""

    def __init__(self) -> None:
        self.sent: list[Dispatch] = []

    def send(self, item: Dispatch, *, delay_s: float = 0.0) -> None:
        self.sent.append(item)


@pytest.fixture
def runtime(settings: Settings, engine: Engine) -> Iterator[Runtime]:
    """A runtime whose dispatches are recorded, not sent."""
    rt = Runtime(settings=settings, engine=engine, dispatcher=RecordingDispatcher())
    yield rt
    if "leases" in vars(rt):  # made: its thread must not renew on a disposed engine
        rt.leases.stop()
    if rt.lease_engine is not None and rt.lease_engine is not engine:
        rt.lease_engine.dispose()


class WorkerProcess:
    """A real worker process (``python -m worker``), its log collected."""

    def __init__(self, env: dict[str, str], args: list[str], prefix: Sequence[str] = ()) -> None:
        self.args = args
        self.env = env
        self.prefix = list(prefix)
        """A command that runs the worker (``ip netns exec …``), or nothing."""
        self.log: list[str] = []
        self.proc: subprocess.Popen[str] | None = None
        self._ready = threading.Event()

    def start(self) -> WorkerProcess:
        self._ready.clear()
        self.proc = subprocess.Popen(
            [
                *self.prefix,
                sys.executable,
                "-m",
                "worker",
                "--loglevel",
                "INFO",
                "--without-gossip",
                "--without-mingle",
                *self.args,
            ],
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        threading.Thread(target=self._pump, args=(self.proc,), daemon=True).start()
        if not self._ready.wait(WORKER_READY_TIMEOUT_S):
            self.stop()
            raise RuntimeError("worker did not become ready:\n" + "\n".join(self.log[-40:]))
        return self

    def _pump(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.log.append(line.rstrip())
            if " ready." in line:
                self._ready.set()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int | None = None) -> int | None:
        if self.proc is None:
            return None
        if sig is None:
            self.proc.terminate()
        else:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code

    def errors(self) -> list[str]:
        return [line for line in self.log if "raised unexpected" in line or "Traceback" in line]


def service_env(settings: Settings, **extra: str) -> dict[str, str]:
    """Environment for a child process that should use ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWARM_")}
    env.update(
        {
            "SWARM_DATABASE_URL": settings.database_url,
            "SWARM_BROKER_URL": settings.broker_url,
            "SWARM_LEASE_TTL_S": str(settings.lease_ttl_s),
            "SWARM_REDISPATCH_AFTER_S": str(settings.redispatch_after_s),
            "SWARM_RECONCILE_INTERVAL_S": str(settings.reconcile_interval_s),
            "SWARM_RETRY_BACKOFF_S": str(settings.retry_backoff_s),
            "SWARM_VERIFY_MIN_FPS": str(settings.verify_min_fps),
            "SWARM_GEMINI_TIMEOUT_S": str(settings.gemini_timeout_s),
            "SWARM_LIMITER_WAIT_S": str(settings.limiter_wait_s),
            "SWARM_LIMITER_PREFIX": settings.limiter_prefix,
            # Runtime tests judge statically; tests of the browser verifier ask for it.
            "SWARM_VERIFIER": "static",
            **extra,
        }
    )
    return env


@pytest.fixture
def start_worker(settings: Settings) -> Iterator[Callable[..., WorkerProcess]]:
    """Factory: start a worker on the sessions and verify queues (``queues`` to choose; the
    threads pool unless ``pool`` says); all are stopped afterwards."""
    started: list[WorkerProcess] = []

    def start(
        *args: str,
        concurrency: int = 20,
        pool: str = "threads",
        queues: str = "sessions,verify",
        **env: str,
    ) -> WorkerProcess:
        name = f"test{len(started)}-{secrets.token_hex(3)}@%h"
        worker = WorkerProcess(
            service_env(settings, **env),
            ["-Q", queues, "-P", pool, "-c", str(concurrency), "-n", name, *args],
        ).start()
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


@pytest.fixture
def fake_gemini() -> Iterator[Callable[..., FakeGemini]]:
    """Factory: start a fake Gemini API on 127.0.0.1; all are stopped afterwards."""
    started: list[FakeGemini] = []

    def start(
        *,
        latency_ms: int = 20,
        mix: dict[str, float] | None = None,
        faults: list[FaultRule] | None = None,
        task: str = "dashboard",
    ) -> FakeGemini:
        sim = SimConfig(latency_ms=latency_ms, mix=mix, task=task)
        fake = FakeGemini(sim=sim, faults=faults).start()
        started.append(fake)
        return fake

    yield start
    for fake in started:
        fake.stop()


@pytest.fixture
def app(settings: Settings) -> Any:
    """A Celery app (producer side) on the test broker and database."""
    from worker.celery import create_app

    return create_app(settings)
