"""``tasks``, ``task check`` and ``run --task`` from the command line, on the embedded default."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from tests.conftest import ROOT
from worker.tasks import HiddenTest, Instance, Task, VerifierKind
from worker.tasks.base import Artifact

pytestmark = pytest.mark.slow


class Halves(Task):
    """Two instances; the reference solution of the second is wrong (a broken task)."""

    name = "halves"
    verifier = VerifierKind.python
    artifacts = (Artifact("solution.py", "text/x-python", 4096),)

    def instances(self) -> Sequence[Instance]:
        return [Instance(f"half-{n}", {"n": n}, {"want": n // 2}) for n in (4, 6)]

    def instructions(self, instance: Instance) -> str:
        return f"Write half() in solution.py returning {instance.public['n']} // 2."

    def files(self, instance: Instance) -> Mapping[str, str]:
        return {"solution.py": "def half():\n    return None\n"}

    def hidden_test(self, instance: Instance) -> HiddenTest:
        return HiddenTest(
            "solution.py",
            f"from solution import half\nassert half() == {instance.hidden['want']}\n",
        )

    def solution(self, instance: Instance) -> Mapping[str, str]:
        wrong = instance.id == "half-6"
        return {
            "solution.py": f"def half():\n    return {0 if wrong else instance.hidden['want']}\n"
        }


def _scheduler(
    tmp_path: Path, *args: str, timeout_s: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scheduler", *args],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def test_task_check_passes_humaneval_and_prints_the_persona_table(tmp_path: Path) -> None:
    # When humaneval is checked on ten of its instances
    done = _scheduler(tmp_path, "task", "check", "humaneval", "--instances", "0-9", "--json")
    # Then oracle passed all, null and cheat none, and the command says so
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    passed = {p["persona"]: p["passed"] for p in out["personas"]}
    assert passed == {"oracle": 10, "null": 0, "cheat": 0, "sloppy": 10}
    assert out["passed"] is True and out["instances"] == 10


def test_task_check_fails_a_task_whose_reference_does_not_pass(tmp_path: Path) -> None:
    done = _scheduler(tmp_path, "task", "check", f"{__name__}:Halves")
    assert done.returncode == 1
    assert "oracle should pass every instance: half-6" in done.stderr
    assert "Traceback" not in done.stderr
    table = done.stdout
    assert "oracle" in table and "FAIL" in table


def test_run_humaneval_on_the_embedded_default_verifies_in_the_sandbox(tmp_path: Path) -> None:
    # When the issue's own command runs, with oracle and sloppy agents
    done = _scheduler(
        tmp_path,
        "run",
        "--task",
        "humaneval",
        "--wave",
        "2x5",
        "--sim-mix",
        "oracle,sloppy",
        "--sim-latency-ms",
        "0",
        "--json",
    )
    # Then every session passed its hidden test in the sandbox, and the task figures say so
    assert done.returncode == 0, done.stderr[-2000:]
    status = json.loads(done.stdout)
    assert status["sessions"]["succeeded"] == 10
    assert status["artifacts"]["verified_by"] == {"sandbox": 10}
    assert status["task"]["name"] == "humaneval" and status["task"]["pass_rate"] == 1.0
    assert status["task"]["instances"] == 10


def test_bad_task_options_are_one_line(tmp_path: Path) -> None:
    for args, says in (
        (["run", "--task", "nosuch"], "no task named 'nosuch'"),
        (["run", "--task", "humaneval", "--instances", "0-999"], "has instances 0 to 163"),
        (["run", "--task", "humaneval", "--sim-mix", "diligent"], "unknown persona(s) diligent"),
        (
            ["run", "--task", "humaneval", "--sample", "3", "--epochs", "2", "--wave", "1x5"],
            "--wave 1x5 makes 5 sessions; 3 instances x 2 epochs need 6",
        ),
    ):
        done = _scheduler(tmp_path, *args, timeout_s=60)
        assert done.returncode == 2, (args, done.stderr)
        assert says in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.browser
def test_task_check_passes_the_dashboard_in_chromium(tmp_path: Path) -> None:
    # When the dashboard is checked on two of its cards, judged in Chromium
    done = _scheduler(tmp_path, "task", "check", "dashboard", "--sample", "2", "--json")
    # Then oracle passed both, and null and cheat (a page with nothing on it; pages that
    # look the part) neither
    assert done.returncode == 0, done.stderr[-2000:]
    passed = {p["persona"]: p["passed"] for p in json.loads(done.stdout)["personas"]}
    assert (passed["oracle"], passed["null"], passed["cheat"]) == (2, 0, 0)
