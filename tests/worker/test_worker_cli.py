"""A worker (``python -m worker`` or ``celery -A worker worker``) refuses bad settings, and a
database it cannot use, with one line, not a traceback."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator

import psycopg
import pytest
from sqlalchemy import Engine

from scheduler.cli.follow import until_finished
from tests.conftest import PG_ADMIN_URL, ROOT, WorkerProcess
from tests.factories import enqueue
from worker.settings import Settings


@pytest.mark.parametrize(
    "command",
    [["-m", "worker"], ["-m", "celery", "-A", "worker", "worker"]],
    ids=["python -m worker", "celery worker"],
)
@pytest.mark.parametrize(
    ("variable", "value", "names"),
    [
        ("SWARM_DATABASE_URL", "bogus://x", "unsupported database 'bogus'"),
        ("SWARM_LEASE_TTL_S", "-3", "SWARM_LEASE_TTL_S"),
    ],
)
def test_a_worker_with_bad_settings_says_what_is_wrong_in_one_line(
    command: list[str], variable: str, value: str, names: str
) -> None:
    line = _refused([*command, "-P", "threads", "-c", "1"], {variable: value})
    assert line.startswith(f"error: {variable}: ")
    assert names in line


def _refused(command: list[str], settings: dict[str, str]) -> str:
    """The one line a worker started with ``settings`` printed as it refused to start."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWARM_")}
    env.update(settings)
    done = subprocess.run(
        [sys.executable, *command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture
def empty_database() -> Iterator[str]:
    """A PostgreSQL database that was never migrated, dropped afterwards."""
    name = f"swarm_empty_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        yield PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.mark.services
@pytest.mark.parametrize(
    ("database", "says"),
    [
        ("unreachable", "unreachable (connection to server at"),
        ("missing", "does not exist on 127.0.0.1:5432: create it"),
        ("empty", "holds no Swarm schema yet: run `python -m scheduler migrate`"),
    ],
)
def test_a_worker_whose_database_cannot_be_used_says_why_in_one_line(
    redis_url: str, empty_database: str, database: str, says: str
) -> None:
    # Given a worker's database: none listening, none of that name, or one never migrated
    server = PG_ADMIN_URL.rsplit("/", 1)[0]
    url = {
        "unreachable": "postgresql://postgres@127.0.0.1:1/swarm",
        "missing": f"{server}/swarm_missing_{secrets.token_hex(4)}",
        "empty": empty_database,
    }[database]
    # When it starts, it stops with one line that says what to do, and no traceback
    line = _refused(
        ["-m", "worker", "-P", "gevent", "-c", "2"],
        {"SWARM_DATABASE_URL": url, "SWARM_BROKER_URL": redis_url},
    )
    assert line.startswith("error: database "), line
    assert says in line, line


@pytest.mark.services
@pytest.mark.parametrize(("task_log", "asked"), [("0", False), ("1", True)], ids=["quiet", "asked"])
def test_a_worker_logs_no_line_per_task_unless_asked(
    settings: Settings,
    engine: Engine,
    start_worker: Callable[..., WorkerProcess],
    task_log: str,
    asked: bool,
) -> None:
    # Given a worker, asked or not for Celery's lines per task
    worker = start_worker(SWARM_TASK_LOG=task_log)
    # When a one-session run goes through it
    run_id = enqueue(settings, "--wave", "1x1", "--sim-latency-ms", "0")
    status = until_finished(engine, run_id, show=False, timeout_s=120)
    assert status.sessions.succeeded == 1, status
    worker.stop()
    # Then each turn task logged its arrival and its end only when asked
    received = [line for line in worker.log if "swarm.turn[" in line and "received" in line]
    ended = [line for line in worker.log if "swarm.turn[" in line and "succeeded in" in line]
    if asked:
        assert len(received) >= status.turns and len(ended) >= status.turns, worker.log
    else:
        assert received == ended == [], worker.log
    # and Swarm's own line of the session's verdict is there either way
    assert any("verdict round 0: succeeded" in line for line in worker.log), worker.log
