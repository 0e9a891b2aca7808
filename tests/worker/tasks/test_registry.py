"""Finding tasks: entry points, ``package.module:factory``, and one line for each failure."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.conftest import ROOT
from worker.errors import ConfigError
from worker.tasks import Instance, Task
from worker.tasks.registry import load_task


class Tiny(Task):
    """A task of one instance, for these tests."""

    name = "tiny"

    def instances(self) -> Sequence[Instance]:
        return [Instance("only", {"word": "hi"})]

    def instructions(self, instance: Instance) -> str:
        return f"Say {instance.public['word']}."


def make_tiny() -> Tiny:
    return Tiny()


class Mute(Tiny):
    """Plays none of the standard personas."""

    personas = ("talker",)
    default_persona = "talker"


def test_the_built_in_tasks_load_by_name() -> None:
    assert load_task("dashboard").name == "dashboard"
    humaneval = load_task("humaneval")
    assert humaneval.name == "humaneval" and len(humaneval.instances()) == 164


@pytest.mark.parametrize(
    "ref", [f"{__name__}:make_tiny", f"{__name__}:Tiny", f"{__name__}:TINY_TASK"]
)
def test_a_task_loads_from_a_factory_a_class_or_an_instance(ref: str) -> None:
    task = load_task(ref)
    assert isinstance(task, Tiny) and task.instance("only").public == {"word": "hi"}
    # and it is loaded once per process
    assert load_task(ref) is task


TINY_TASK = Tiny()


@pytest.mark.parametrize(
    ("ref", "says"),
    [
        ("nosuch", "no task named 'nosuch': known tasks are dashboard, humaneval"),
        ("nosuch_module_xyz:task", "task nosuch_module_xyz:task: cannot load it (ModuleNotFound"),
        (f"{__name__}:nothing_here", "cannot load it (AttributeError"),
        (f"{__name__}:ROOT", "is neither a Task nor a factory of one"),
        (f"{__name__}:Mute", "does not play the personas oracle, null, cheat, sloppy"),
    ],
)
def test_a_task_that_does_not_load_says_why_in_one_line(ref: str, says: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_task(ref)
    assert says in str(refused.value)
    assert "\n" not in str(refused.value)


def test_tasks_lists_entry_points_and_a_broken_one_in_one_line(tmp_path: Path) -> None:
    # Given an installed distribution whose entry point names a module that is not there
    info = tmp_path / "broken_tasks-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-tasks\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[swarm.tasks]\nbroken = broken_tasks_xyz:task\n")
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    # When the tasks are listed
    listed = subprocess.run(
        [sys.executable, "-m", "scheduler", "tasks", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    # Then the built-ins are there with their versions and counts, the broken one says why,
    # and the exit code says that one failed
    out = json.loads(listed.stdout)
    by_name = {t["name"]: t for t in out["tasks"]}
    assert by_name["humaneval"]["instances"] == 164 and by_name["humaneval"]["version"] == "1"
    assert by_name["dashboard"]["verifier"] == "chromium"
    assert [f["name"] for f in out["failed"]] == ["broken"]
    assert "broken_tasks_xyz" in out["failed"][0]["error"]
    assert listed.returncode == 1
    # And as a table, the failure is one line on stderr
    table = subprocess.run(
        [sys.executable, "-m", "scheduler", "tasks"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "humaneval" in table.stdout and "164" in table.stdout
    assert table.stderr.strip().splitlines() == [f"error: {out['failed'][0]['error']}"]


class Stringly(Tiny):
    """Names its verifier as a plain string."""

    verifier = "static"  # type: ignore[assignment]


def test_a_verifier_named_as_a_string_is_taken() -> None:
    from worker.tasks import VerifierKind

    task = load_task(f"{__name__}:Stringly")
    assert task.verifier is VerifierKind.static
