"""A task's fingerprint: stable for the same task, changed by anything that decides a session."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from worker.errors import TaskChanged
from worker.tasks import Instance, Task
from worker.tasks.fingerprint import fingerprint, recorded_task
from worker.tasks.registry import load_task


class Words(Task):
    name = "words"

    def __init__(self, words: Sequence[str], hint: str = "") -> None:
        self.words = words
        self.hint = hint

    def instances(self) -> Sequence[Instance]:
        return [Instance(w, {"word": w}, {"secret": w.upper()}) for w in self.words]

    def instructions(self, instance: Instance) -> str:
        return f"Spell {instance.public['word']}.{self.hint}"


def test_the_same_task_has_the_same_fingerprint() -> None:
    assert fingerprint(Words(["a", "b"])) == fingerprint(Words(["a", "b"]))
    assert len(fingerprint(load_task("humaneval"))) == 64


@pytest.mark.parametrize(
    "changed", [Words(["a", "c"]), Words(["a", "b"], hint=" Quickly."), Words(["a"])]
)
def test_an_instance_or_instructions_changed_change_it(changed: Words) -> None:
    assert fingerprint(changed) != fingerprint(Words(["a", "b"]))


def test_a_run_s_task_is_refused_when_its_version_or_fingerprint_changed() -> None:
    task = load_task("humaneval")
    assert recorded_task("humaneval", version="1", sha256=fingerprint(task)) is task
    with pytest.raises(TaskChanged, match="is at version 1, the run recorded 0"):
        recorded_task("humaneval", version="0", sha256=None)
    with pytest.raises(TaskChanged, match="changed since the run was made"):
        recorded_task("humaneval", version="1", sha256="0" * 64)
