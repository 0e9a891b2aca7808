"""Tasks on a fleet: HumanEval judged by a sandbox worker of its own, through the real SDK,
and a task package installed the way a user installs one."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from ops.fake_gemini import FakeGemini
from scheduler.cli.follow import until_finished
from tests.conftest import ROOT, WorkerProcess, service_env
from tests.factories import duplicates, enqueue
from worker.settings import Settings
from worker.store.tables import sessions, verifications

pytestmark = [pytest.mark.services, pytest.mark.slow]

#: Seconds a whole run in these tests may take.
RUN_TIMEOUT_S = 180


def _verified_by(engine: Engine, run_id: int) -> list[str]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                select(verifications.c.method)
                .join(sessions)
                .where(sessions.c.run_id == run_id, verifications.c.passed)
            ).scalars()
        )


def _judged_in(worker: WorkerProcess) -> int:
    """Verdicts the worker's log says it recorded."""
    return sum(1 for line in worker.log if " verdict round " in line)


def test_humaneval_runs_on_a_fleet_with_its_sandbox_queue_on_a_worker_of_its_own(
    settings: Settings, engine: Engine, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given a worker of turns and pages, and a worker of the sandbox queue alone
    turns = start_worker(queues="sessions,verify")
    sandbox = start_worker(queues="sandbox", concurrency=2)
    # When a humaneval run of oracle and sloppy agents is followed to its end
    run_id = enqueue(
        settings,
        "--task",
        "humaneval",
        "--instances",
        "0-5",
        "--sim-mix",
        "oracle,sloppy",
        "--sim-latency-ms",
        "50",
    )
    status = until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
    # Then every session passed its hidden test, each judged in the sandbox worker
    assert status.sessions.succeeded == status.sessions.total == 6, status
    assert set(_verified_by(engine, run_id)) == {"sandbox"}
    assert _judged_in(sandbox) >= 6 and _judged_in(turns) == 0
    assert status.task is not None and status.task.pass_rate == 1.0
    assert duplicates(engine) == {"usage": 0, "model_events": 0, "version_gaps": 0}
    assert turns.errors() == [] and sandbox.errors() == []


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (["-P", "threads"], {"SWARM_SANDBOX_PYTHON": "/nonexistent/python3"}, "cannot be built"),
        (["-P", "gevent"], {}, "not -P gevent"),
    ],
)
def test_a_sandbox_worker_refuses_to_start_where_it_cannot_confine_code(
    settings: Settings, args: list[str], env: dict[str, str], says: str
) -> None:
    # When a worker of the sandbox queue starts where the sandbox cannot be built, or on a
    # pool that cannot wait for it
    started = subprocess.run(
        [sys.executable, "-m", "worker", "-Q", "sandbox", "-c", "1", *args],
        cwd=ROOT,
        env=service_env(settings, **env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    # Then it exits at once, with one line that says why
    assert started.returncode != 0
    errors = [line for line in started.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and says in errors[0], started.stderr[-2000:]
    assert "Traceback" not in started.stderr


def test_humaneval_through_the_sdk_against_the_fake_gemini_api(
    settings: Settings,
    engine: Engine,
    start_worker: Callable[..., WorkerProcess],
    fake_gemini: Callable[..., FakeGemini],
) -> None:
    # Given the fake API playing humaneval's oracle, and a worker of every queue on it
    fake = fake_gemini(task="humaneval", mix={"oracle": 1.0, "sloppy": 1.0})
    worker = start_worker(
        queues="sessions,verify,sandbox",
        SWARM_GEMINI_BASE_URL=fake.url,
        GEMINI_API_KEY="test-key",
    )
    # When a run on a Gemini model is followed to its end
    run_id = enqueue(
        settings, "--task", "humaneval", "--instances", "10-13", model="gemini-3-flash-preview"
    )
    status = until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
    # Then every request went through the SDK and every session passed in the sandbox
    assert status.sessions.succeeded == 4, status
    assert all(s.status == 200 for s in fake.served), [s.status for s in fake.served]
    assert status.cost_usd > 0
    assert worker.errors() == []


def test_the_example_task_package_runs_on_a_fleet_after_pip_install(
    settings: Settings,
    engine: Engine,
    start_worker: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    # Given the example package installed as a user would (here into a directory of its own)
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            str(target),
            str(ROOT / "examples" / "textkit"),
        ],
        check=True,
        timeout=300,
    )
    path = os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")]).strip(os.pathsep)
    # And a worker of every queue that finds it
    worker = start_worker(queues="sessions,verify,sandbox", PYTHONPATH=path)
    # When a run of it is enqueued from a process that finds it too, and followed
    enqueued = subprocess.run(
        [
            sys.executable,
            "-m",
            "scheduler",
            "enqueue",
            "--task",
            "textkit",
            "--wave",
            "1x3",
            "--sim-mix",
            "oracle=2,sloppy",
            "--sim-latency-ms",
            "0",
            "--follow",
            "--json",
        ],
        cwd=ROOT,
        env=service_env(settings, PYTHONPATH=path),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    # Then all three of its instances were solved on the fleet
    assert enqueued.returncode == 0, enqueued.stderr[-2000:]
    assert '"name": "textkit"' in enqueued.stdout
    run_id = int(enqueued.stderr.split("run ", 1)[1].split(":", 1)[0])
    status = until_finished(engine, run_id, show=False, timeout_s=10)
    assert status.sessions.succeeded == 3 and status.task is not None
    assert status.task.solved == 3
    assert worker.errors() == []
