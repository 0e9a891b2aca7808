"""A run's figures as a task's score: pass rate, pass@k over epochs, dollars per solved instance.

pass@k is the unbiased estimator of the HumanEval paper (Chen et al., 2021): for an instance
played n times of which c passed, the chance that at least one of k plays drawn from those n
passes, ``1 - C(n-c, k) / C(n, k)``, averaged over the instances played at least k times.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.engine import Connection

from worker.reads.queries import per_session
from worker.states import TERMINAL, SessionStatus
from worker.store.tables import runs, sessions

__all__ = ["TaskFigures", "pass_at_k", "task_figures"]

#: The k of pass@k a report shows, where the epochs allow.
SHOWN_K = (1, 2, 5, 10, 100)


@dataclass(frozen=True)
class TaskFigures:
    """How a run's sessions scored on its task."""

    name: str
    version: str
    instances: int
    """Distinct instances the run played."""
    epochs: int
    """Most plays of one instance."""
    ended: int
    """Sessions that ended."""
    passed: int
    """Sessions whose handoff the verifier passed."""
    pass_rate: float | None
    """``passed / ended``; None before a session ended."""
    pass_at_k: dict[int, float]
    """pass@k for each k of :data:`SHOWN_K` that every instance was played often enough for."""
    solved: int
    """Instances solved at least once."""
    usd_per_solved: float | None
    """The run's model dollars over the instances it solved."""
    turns_per_solve: float | None
    """Mean turns of the sessions that passed."""


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one instance played ``n`` times with ``c`` passes."""
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def task_figures(conn: Connection, run_id: int, *, cost_usd: float) -> TaskFigures:
    """The task figures of run ``run_id`` (its ended sessions count; running ones wait)."""
    name, version = conn.execute(
        select(runs.c.task, runs.c.task_version).where(runs.c.id == run_id)
    ).one()
    per = per_session(run_id)
    rows = conn.execute(
        select(sessions.c.instance_id, sessions.c.index, sessions.c.status, per.c.turns)
        .outerjoin(per, per.c.session_id == sessions.c.id)
        .where(sessions.c.run_id == run_id)
    ).all()
    plays: dict[str, list[bool]] = defaultdict(list)
    passed_turns: list[int] = []
    every: set[str] = set()
    ended = 0
    for instance_id, index, status, turns in rows:
        # Sessions made before tasks record no instance: each is its own.
        key = instance_id or f"#{index}"
        every.add(key)
        if SessionStatus(status) not in TERMINAL:
            continue
        ended += 1
        won = status == SessionStatus.succeeded.value
        plays[key].append(won)
        if won:
            passed_turns.append(int(turns or 0))
    passed = len(passed_turns)
    solved = sum(1 for results in plays.values() if any(results))
    fewest = min((len(r) for r in plays.values()), default=0)
    at_k = {
        k: statistics.fmean(pass_at_k(len(r), sum(r), k) for r in plays.values())
        for k in SHOWN_K
        if plays and k <= fewest
    }
    return TaskFigures(
        name=name,
        version=version,
        instances=len(every),
        epochs=max((len(r) for r in plays.values()), default=0),
        ended=ended,
        passed=passed,
        pass_rate=passed / ended if ended else None,
        pass_at_k=at_k,
        solved=solved,
        usd_per_solved=cost_usd / solved if solved else None,
        turns_per_solve=statistics.fmean(passed_turns) if passed_turns else None,
    )
