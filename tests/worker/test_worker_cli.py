"""A worker (``python -m worker`` or ``celery -A worker worker``) refuses bad settings with one
line, not a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

import pytest
from sqlalchemy import Engine

from scheduler.cli.follow import until_finished
from tests.conftest import ROOT, WorkerProcess
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
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWARM_")}
    env[variable] = value
    done = subprocess.run(
        [sys.executable, *command, "-P", "threads", "-c", "1"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: {variable}: ")
    assert names in lines[0]


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
