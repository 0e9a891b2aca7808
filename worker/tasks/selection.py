"""Which instances a run plays: all of them, some by position or id, or a seeded sample.

``--instances 0-19,25`` picks by position in the task's order (ranges inclusive), and ids
(``HumanEval/3``) pick themselves; ``--sample N`` draws N of them with the run's seed. A
run's sessions then play the picked instances in turn: session ``n`` plays instance
``n % k`` of the ``k`` picked, in epoch ``n // k``.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from worker.errors import InputError
from worker.tasks.base import Instance, Task

__all__ = ["Assignment", "assign", "select"]

_RANGE = re.compile(r"^(\d+)\s*-\s*(\d+)$")


@dataclass(frozen=True)
class Assignment:
    """What one session of a run plays."""

    instance: Instance
    epoch: int


def select(task: Task, *, instances: str | None, sample: int | None, seed: int) -> list[Instance]:
    """The instances a run plays, in order.

    Raises:
        InputError: a position or id the task does not have, or a sample larger than the
            choice.
    """
    every = task.instances()
    chosen = list(every) if instances is None else _pick(task, every, instances)
    if sample is not None:
        if not 1 <= sample <= len(chosen):
            raise InputError(
                f"--sample {sample}: task {task.name} offers {len(chosen)} instances to draw from"
            )
        picked = sorted(random.Random(f"sample:{seed}").sample(range(len(chosen)), sample))
        chosen = [chosen[i] for i in picked]
    return chosen


def assign(chosen: Sequence[Instance], total: int) -> list[Assignment]:
    """What each of ``total`` sessions plays: the chosen instances in turn, epoch by epoch."""
    return [Assignment(chosen[n % len(chosen)], n // len(chosen)) for n in range(total)]


def _pick(task: Task, every: Sequence[Instance], text: str) -> list[Instance]:
    picked: list[Instance] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        span = _RANGE.match(item)
        if span is not None:
            first, last = int(span[1]), int(span[2])
            if first > last or last >= len(every):
                raise InputError(
                    f"--instances {item}: task {task.name} has instances 0 to {len(every) - 1}"
                )
            picked += [every[i] for i in range(first, last + 1)]
        elif item.isdigit():
            if int(item) >= len(every):
                raise InputError(
                    f"--instances {item}: task {task.name} has instances 0 to {len(every) - 1}"
                )
            picked.append(every[int(item)])
        else:
            try:
                picked.append(task.instance(item))
            except Exception:
                raise InputError(
                    f"--instances: task {task.name} has no instance {item!r}"
                ) from None
    if not picked:
        raise InputError("--instances names no instance")
    return picked
