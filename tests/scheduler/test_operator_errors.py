"""Operator errors are one line on stderr, a named exit code, and nothing half-created.

Each test prints one row of the table ``input | stderr | exit code | database``
(``pytest -s`` shows it).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
import redis
from click.testing import CliRunner, Result
from sqlalchemy import Engine, func, select

from scheduler.cli import commands
from scheduler.cli.follow import _StallWatch
from scheduler.cli.services import (
    EXIT_NO_WORKER,
    EXIT_NOT_DISPATCHED,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    OperatorError,
)
from tests.conftest import PG_ADMIN_URL, ROOT, WorkerProcess
from worker.reads.progress import Claims
from worker.settings import Settings
from worker.store.engine import make_engine
from worker.store.tables import runs, sessions

#: A local port nothing listens on.
CLOSED = "127.0.0.1:1"


def _scheduler(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m scheduler ARGS`` as an operator runs it, with only ``env`` configured."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SWARM_")}
    return subprocess.run(
        [sys.executable, "-m", "scheduler", *args],
        cwd=cwd,
        env={**clean, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def _one_line(stderr: str) -> str:
    """The only line of ``stderr``, which must be an ``error:`` line and no traceback."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), stderr
    assert "Traceback" not in stderr
    return lines[0]


def _row(given: str, line: str, code: int, database: str) -> None:
    print(f"\n| {given} | {line} | {code} | {database} |")


def _counts(engine: Engine) -> tuple[int, int]:
    with engine.connect() as conn:
        return (
            conn.execute(select(func.count()).select_from(runs)).scalar_one(),
            conn.execute(select(func.count()).select_from(sessions)).scalar_one(),
        )


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"SWARM_DATABASE_URL": "not-a-url"}, "SWARM_DATABASE_URL: not a database URL"),
        (
            {"SWARM_DATABASE_URL": "mysql://swarm:s3cret@db/swarm"},
            "SWARM_DATABASE_URL: unsupported database 'mysql'",
        ),
        (
            {"SWARM_DATABASE_URL": "postgresql+psycopg2://swarm@db/swarm"},
            "SWARM_DATABASE_URL: unsupported database 'postgresql+psycopg2'",
        ),
        (
            {"SWARM_DATABASE_URL": "postgresql://swarm@db:port/swarm"},
            "SWARM_DATABASE_URL: malformed postgresql URL",
        ),
        ({"SWARM_BROKER_URL": "amqp://guest@rabbit//"}, "SWARM_BROKER_URL: unsupported broker"),
        ({"SWARM_BROKER_URL": "redis://redis:port/0"}, "SWARM_BROKER_URL: malformed redis URL"),
        ({"SWARM_BROKER_URL": "localhost:6379"}, "SWARM_BROKER_URL: not a broker URL"),
    ],
)
def test_a_bad_url_fails_at_settings_in_one_line(
    tmp_path: Path, env: dict[str, str], expected: str
) -> None:
    # Given a malformed or unsupported URL, When an operator enqueues
    result = _scheduler("enqueue", cwd=tmp_path, **env)
    # Then one line names the variable and what to use, and nothing was created
    line = _one_line(result.stderr)
    assert line.startswith(f"error: {expected}"), line
    assert "s3cret" not in result.stderr
    assert result.returncode == EXIT_USAGE
    assert list(tmp_path.iterdir()) == []
    _row(str(env), line, result.returncode, "nothing (no file, no connection)")


@pytest.mark.parametrize(
    ("database", "expected", "code"),
    [
        ("mysql://swarm@db/swarm", "--database: unsupported database 'mysql'", EXIT_USAGE),
        (
            "sqlite:////nonexistent/dir/swarm.db",
            "cannot open the SQLite database /nonexistent/dir/swarm.db",
            EXIT_UNAVAILABLE,
        ),
    ],
)
def test_a_bad_embedded_database(tmp_path: Path, database: str, expected: str, code: int) -> None:
    result = _scheduler("run", "--database", database, cwd=tmp_path)
    line = _one_line(result.stderr)
    assert line.startswith(f"error: {expected}"), line
    assert result.returncode == code
    assert list(tmp_path.iterdir()) == []
    _row(f"run --database {database}", line, result.returncode, "nothing")


def test_the_same_check_holds_for_settings_built_in_code() -> None:
    with pytest.raises(ValueError, match="unsupported database 'mysql'"):
        Settings(database_url="mysql://u@h/db")
    assert Settings(database_url="postgres://u@h/db").database_url == "postgresql+psycopg://u@h/db"
    assert Settings(broker_url="rediss://h:6380/1").broker_url == "rediss://h:6380/1"


@pytest.mark.services
def test_a_database_that_does_not_exist(tmp_path: Path) -> None:
    # Given a PostgreSQL server without the named database
    try:
        psycopg.connect(PG_ADMIN_URL, connect_timeout=5).close()
    except psycopg.OperationalError as exc:
        pytest.skip(f"PostgreSQL unreachable: {exc}")
    name = f"swarm_missing_{secrets.token_hex(4)}"
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    for command in ("enqueue", "migrate"):
        # When an operator enqueues or migrates
        result = _scheduler(command, cwd=tmp_path, SWARM_DATABASE_URL=url)
        # Then one line says to create it, and nothing created it
        line = _one_line(result.stderr)
        assert f"database '{name}' does not exist" in line
        assert f"createdb {name}" in line
        assert result.returncode == EXIT_USAGE
        _row(f"{command}, database {name} missing", line, result.returncode, "no database")
    with psycopg.connect(PG_ADMIN_URL) as admin:
        found = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
    assert found is None


def test_an_unreachable_database(tmp_path: Path) -> None:
    result = _scheduler(
        "enqueue", cwd=tmp_path, SWARM_DATABASE_URL=f"postgresql://swarm:s3cret@{CLOSED}/swarm"
    )
    line = _one_line(result.stderr)
    assert "unreachable" in line and "start PostgreSQL" in line
    assert "s3cret" not in line
    assert result.returncode == EXIT_UNAVAILABLE
    _row(f"SWARM_DATABASE_URL on {CLOSED}", line, result.returncode, "nothing")


@pytest.mark.services
def test_an_unreachable_broker_creates_nothing(
    tmp_path: Path, settings: Settings, engine: Engine
) -> None:
    # Given a migrated database and a broker on a closed port
    for command in (["enqueue", "--wave", "1x2", "--follow"], ["resume", "1"]):
        # When an operator enqueues (and would follow), or resumes
        result = _scheduler(
            *command,
            cwd=tmp_path,
            SWARM_DATABASE_URL=settings.database_url,
            SWARM_BROKER_URL=f"redis://{CLOSED}/0",
        )
        # Then one line says the broker is down, at once, and no run was created
        line = _one_line(result.stderr)
        assert f"broker redis://{CLOSED}/0 unreachable" in line
        assert result.returncode == EXIT_UNAVAILABLE
        assert _counts(engine) == (0, 0)
        _row(f"{command[0]}, broker on {CLOSED}", line, result.returncode, "no run row")


def test_enqueue_refuses_the_embedded_broker(tmp_path: Path) -> None:
    # Given a migrated SQLite file and no broker configured
    url = f"sqlite:///{tmp_path / 'swarm.db'}"
    assert CliRunner().invoke(commands.cli, ["--database-url", url, "migrate"]).exit_code == 0
    # When an operator enqueues: nothing in another process could take the work
    result = _scheduler("enqueue", cwd=tmp_path, SWARM_DATABASE_URL=url)
    # Then one line points at SWARM_BROKER_URL and at `run`, and no run was created
    line = _one_line(result.stderr)
    assert "SWARM_BROKER_URL" in line and "scheduler run" in line
    assert result.returncode == EXIT_USAGE
    engine = make_engine(Settings(database_url=url))
    try:
        assert _counts(engine) == (0, 0)
    finally:
        engine.dispose()
    _row("enqueue, no SWARM_BROKER_URL", line, result.returncode, "no run row")


def _invoke(settings: Settings, *args: str, broker_url: str | None = None) -> Result:
    return CliRunner().invoke(
        commands.cli,
        [
            "--database-url",
            settings.database_url,
            "--broker-url",
            broker_url or settings.broker_url,
            *args,
        ],
    )


@pytest.mark.services
def test_a_send_that_fails_after_the_check_leaves_a_resumable_run(
    settings: Settings, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a broker that answered the check, then went away before the first wave was sent
    monkeypatch.setattr(commands, "check_broker", lambda app, settings: None)
    # When an operator enqueues
    result = _invoke(settings, "enqueue", "--wave", "1x2", broker_url=f"redis://{CLOSED}/0")
    # Then one line says the run is recorded and how to resume it
    line = _one_line(result.stderr)
    assert "run 1 is recorded" in line and "python -m scheduler resume 1" in line
    assert result.exit_code == EXIT_NOT_DISPATCHED
    # and its sessions are due, no turn taken: resumable
    with engine.connect() as conn:
        rows = conn.execute(
            select(sessions.c.status, sessions.c.lease_epoch, sessions.c.next_turn)
        ).all()
    assert [tuple(r) for r in rows] == [("running", 0, 0)] * 2
    _row("enqueue, broker gone after the check", line, result.exit_code, "run 1, 2 due sessions")
    # When the broker is back and the operator resumes, Then both first turns are sent
    monkeypatch.undo()
    resumed = _invoke(settings, "resume", "1")
    assert resumed.exit_code == EXIT_OK, resumed.output
    assert "2 turns and 0 verifications dispatched (2 sent)" in resumed.output
    redis.Redis.from_url(settings.broker_url).flushdb()


@pytest.mark.services
def test_follow_says_when_no_worker_claims_the_work(settings: Settings, engine: Engine) -> None:
    # Given a reachable broker and database and no worker on the sessions queue
    # When an operator enqueues and follows with a short threshold
    result = _invoke(
        settings, "enqueue", "--wave", "1x2", "--follow", "--stall-after-s", "1.5", "--json"
    )
    # Then it stops waiting with one line saying what to start, after the "run 1" line
    # (--json puts that line on stderr and draws no progress bar)
    first, *lines = result.stderr.strip().splitlines()
    assert first.startswith("run 1: 1x2")
    assert len(lines) == 1
    assert lines[0].startswith("error: no worker has claimed work of run 1 for 1.5 s and none")
    assert "python -m worker -Q sessions,verify" in lines[0]
    assert result.stdout == ""
    assert "Traceback" not in result.output
    assert result.exit_code == EXIT_NO_WORKER
    # and the run stays queued for a worker that starts later
    with engine.connect() as conn:
        statuses = conn.execute(select(sessions.c.status, sessions.c.lease_epoch)).all()
    assert [tuple(r) for r in statuses] == [("running", 0)] * 2
    _row("enqueue --follow, no worker", lines[0], result.exit_code, "run 1, 2 due sessions")
    redis.Redis.from_url(settings.broker_url).flushdb()


def _claims(progress: int, turns: int = 0, verdicts: int = 0) -> Claims:
    return Claims((progress,), turns, verdicts)


def _roles(*roles: str) -> Callable[[], frozenset[str]]:
    return lambda: frozenset(roles)


def test_the_stall_watch_raises_only_without_a_live_worker(
    caplog: pytest.LogCaptureFixture,
) -> None:
    none = _roles()
    watch = _StallWatch(run_id=3, after_s=30)
    # Given turns due and nothing claimed, When less than the threshold passes, Then quiet
    watch.check(_claims(1, 2), now_s=0, live_roles=none)
    watch.check(_claims(1, 2), now_s=29, live_roles=none)
    # When a claim happens, Then the clock starts again
    watch.check(_claims(2, 2), now_s=29, live_roles=none)
    watch.check(_claims(2, 2), now_s=58, live_roles=none)
    # When nothing moves for the threshold and no sessions worker is alive, Then it raises
    with pytest.raises(OperatorError, match="on the sessions queue") as raised:
        watch.check(_claims(2, 2), now_s=59, live_roles=_roles("verify", "browser"))
    assert raised.value.exit_code == EXIT_NO_WORKER
    # Given a live sessions worker that claims nothing (a model's retry delay, say)
    watch = _StallWatch(run_id=3, after_s=30)
    alive = _roles("sessions")
    watch.check(_claims(1, 2), now_s=0, live_roles=alive)
    # Then it warns once and keeps waiting
    watch.check(_claims(1, 2), now_s=31, live_roles=alive)
    watch.check(_claims(1, 2), now_s=62, live_roles=alive)
    assert [r.getMessage() for r in caplog.records if "run 3" in r.getMessage()] == [
        "workers are alive but none has claimed work of run 3 for 30 s (2 sessions wait): "
        "a model retry delay, or workers on another broker?"
    ]
    # and when those workers are gone too, Then it raises at its next look
    with pytest.raises(OperatorError, match="none is alive"):
        watch.check(_claims(1, 2), now_s=93, live_roles=none)
    # Given only verdicts due and no worker at all, Then it names the verify queue
    watch = _StallWatch(run_id=3, after_s=30)
    watch.check(_claims(1, 0, 1), now_s=0, live_roles=none)
    with pytest.raises(OperatorError, match="on the verify queue"):
        watch.check(_claims(1, 0, 1), now_s=30, live_roles=none)
    # Given nothing due (turns in flight), Then the clock never runs
    watch = _StallWatch(run_id=3, after_s=30)
    watch.check(_claims(1), now_s=0, live_roles=none)
    watch.check(_claims(1), now_s=300, live_roles=none)


@pytest.mark.services
@pytest.mark.slow
def test_follow_with_a_worker_running_sees_the_run_through(
    settings: Settings, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given a worker on both queues
    start_worker(concurrency=4)
    # When an operator enqueues and follows with a short stall threshold
    result = _invoke(
        settings,
        "enqueue",
        "--wave",
        "2x2",
        "--sim-latency-ms",
        "20",
        "--sim-mix",
        "diligent",
        "--follow",
        "--stall-after-s",
        "2",
        "--json",
    )
    # Then the run ends and no stall is reported
    assert result.exit_code == EXIT_OK, result.output
    assert "error:" not in result.stderr
    assert json.loads(result.stdout)["sessions"]["succeeded"] == 4
