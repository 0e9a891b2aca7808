"""Two fleets (two databases) share one Redis database and never touch each other's work."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import psycopg
import pytest
import redis

from scheduler.cli.follow import until_finished
from tests.conftest import PG_ADMIN_URL, WorkerProcess, service_env
from tests.factories import enqueue
from worker.settings import Settings
from worker.store.engine import make_engine, migrate
from worker.store.fleet import fleet_id

pytestmark = [pytest.mark.services, pytest.mark.slow]

#: Long enough that no reconciler re-dispatch can rescue a task the other fleet took.
NO_RESCUE_ENV = {"SWARM_REDISPATCH_AFTER_S": "600", "SWARM_VERIFY_REDISPATCH_AFTER_S": "600"}


@pytest.fixture
def second_database(settings: Settings) -> Iterator[Settings]:
    """The settings of a second fleet: its own database, the same Redis database."""
    name = f"swarm_test_b_{secrets.token_hex(4)}"
    admin = psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5)
    admin.execute(f'CREATE DATABASE "{name}"')
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    migrate(Settings(database_url=url).database_url)
    yield settings.model_copy(update={"database_url": Settings(database_url=url).database_url})
    admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    admin.close()


def _worker(settings: Settings, name: str) -> WorkerProcess:
    return WorkerProcess(
        service_env(settings, **NO_RESCUE_ENV),
        ["-Q", "sessions,verify", "-P", "threads", "-c", "10", "-n", f"{name}@%h"],
    ).start()


def test_two_fleets_on_one_redis_database_keep_to_their_own_work(
    settings: Settings, second_database: Settings
) -> None:
    # Given two fleets, each with its own database and worker, on the same Redis database
    fleets = {"a": settings, "b": second_database}
    engines = {k: make_engine(s) for k, s in fleets.items()}
    ids = {k: fleet_id(e) for k, e in engines.items()}
    assert ids["a"] != ids["b"]
    workers = {k: _worker(s, f"fleet-{k}-{secrets.token_hex(3)}") for k, s in fleets.items()}
    try:
        # When both enqueue a run at the same time
        runs = {
            k: enqueue(s, "--wave", "2x3", "--sim-latency-ms", "100") for k, s in fleets.items()
        }
        # Then both complete, every session verified
        figures = {
            k: until_finished(engines[k], runs[k], show=False, timeout_s=120) for k in fleets
        }
        keys = redis.Redis.from_url(settings.broker_url, decode_responses=True).keys("swarm:*")
    finally:
        for worker in workers.values():
            worker.stop()
        for engine in engines.values():
            engine.dispose()
    assert {k: f.sessions.succeeded for k, f in figures.items()} == {"a": 6, "b": 6}
    # without a reconciler re-dispatch, and no worker was handed a turn of the other fleet
    for worker in workers.values():
        assert not [line for line in worker.log if "reconciler re-dispatching" in line]
        assert not [line for line in worker.log if "skipped: not due" in line]
        assert worker.errors() == []
    # because each fleet's broker keys live under its own prefix
    prefixes = {str(key).split(":")[1] for key in keys}
    assert {ids["a"], ids["b"]} <= prefixes
