"""Which instances a run plays: positions, ranges and ids; a seeded sample; epochs."""

from __future__ import annotations

import pytest

from worker.errors import InputError
from worker.tasks.humaneval.task import task as humaneval
from worker.tasks.selection import assign, select


def _ids(**kw: object) -> list[str]:
    return [i.id for i in select(humaneval, seed=kw.pop("seed", 0), **kw)]  # type: ignore[arg-type]


def test_positions_ranges_and_ids_pick_in_the_order_given() -> None:
    assert _ids(instances="0-2,10,HumanEval/5", sample=None) == [
        "HumanEval/0",
        "HumanEval/1",
        "HumanEval/2",
        "HumanEval/10",
        "HumanEval/5",
    ]
    assert len(_ids(instances=None, sample=None)) == 164


def test_a_sample_is_drawn_with_the_seed() -> None:
    first = _ids(instances=None, sample=5, seed=1)
    assert first == _ids(instances=None, sample=5, seed=1)
    assert first != _ids(instances=None, sample=5, seed=2)
    assert len(set(first)) == 5


@pytest.mark.parametrize(
    ("instances", "sample", "says"),
    [
        ("0-200", None, "has instances 0 to 163"),
        ("HumanEval/999", None, "has no instance 'HumanEval/999'"),
        ("0-3", 9, "offers 4 instances to draw from"),
        (",", None, "names no instance"),
    ],
)
def test_a_choice_the_task_cannot_make_is_refused(
    instances: str, sample: int | None, says: str
) -> None:
    with pytest.raises(InputError, match=says):
        select(humaneval, instances=instances, sample=sample, seed=0)


def test_sessions_play_the_chosen_instances_in_turn_epoch_by_epoch() -> None:
    chosen = select(humaneval, instances="0-2", sample=None, seed=0)
    plan = assign(chosen, 7)
    assert [(p.instance.id[-1], p.epoch) for p in plan] == [
        ("0", 0),
        ("1", 0),
        ("2", 0),
        ("0", 1),
        ("1", 1),
        ("2", 1),
        ("0", 2),
    ]
