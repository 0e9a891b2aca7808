"""The store's runs and ladders, newest first: what ``serve`` lists on its first page.

One row per run or ladder with what a list needs (where it stands, how far its sessions
got, what it cost so far), read in a few grouped queries rather than a run's whole figures
(:func:`worker.reads.figures.run_figures`), so a store of many runs lists quickly.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from worker.states import TERMINAL, RunStatus, SessionStatus
from worker.store.tables import ladders, runs, sessions, usage

__all__ = ["DEFAULT_LIST_LIMIT", "LadderListing", "RunListing", "ladder_list", "run_list"]

#: Rows a list shows at most, the newest first.
DEFAULT_LIST_LIMIT = 200


@dataclass(frozen=True)
class RunListing:
    """One run as a list shows it."""

    run_id: int
    ladder_id: int | None
    task: str
    model: str
    profile: str
    waves_spec: str
    """The wave spec the run was created with, e.g. ``2x2``."""
    status: RunStatus
    created_at: datetime
    sessions: int
    ended: int
    """Sessions in a terminal state."""
    succeeded: int
    cost_usd: float
    """Sum of the run's ``usage.cost_usd`` so far."""


@dataclass(frozen=True)
class LadderListing:
    """One ladder as a list shows it."""

    ladder_id: int
    model: str
    tiers: list[str]
    profiles: list[str]
    status: str
    created_at: datetime
    runs: list[int]
    """Its runs made so far, in order."""


def run_list(conn: Connection, *, limit: int = DEFAULT_LIST_LIMIT) -> list[RunListing]:
    """The newest ``limit`` runs, newest first."""
    rows = conn.execute(select(runs).order_by(runs.c.id.desc()).limit(limit)).all()
    if not rows:
        return []
    ids = [r.id for r in rows]
    by_status: dict[int, Counter[SessionStatus]] = {i: Counter() for i in ids}
    for run_id, status, n in conn.execute(
        select(sessions.c.run_id, sessions.c.status, func.count())
        .where(sessions.c.run_id.in_(ids))
        .group_by(sessions.c.run_id, sessions.c.status)
    ):
        by_status[run_id][SessionStatus(status)] += int(n)
    spent = conn.execute(
        select(usage.c.run_id, func.coalesce(func.sum(usage.c.cost_usd), 0.0))
        .where(usage.c.run_id.in_(ids))
        .group_by(usage.c.run_id)
    )
    cost = {int(run_id): float(dollars) for run_id, dollars in spent}
    return [
        RunListing(
            run_id=r.id,
            ladder_id=r.ladder_id,
            task=r.task,
            model=r.model,
            profile=r.profile,
            waves_spec=str(r.config.get("waves")),
            status=RunStatus(r.status),
            created_at=r.created_at,
            sessions=by_status[r.id].total(),
            ended=sum(by_status[r.id][s] for s in TERMINAL),
            succeeded=by_status[r.id][SessionStatus.succeeded],
            cost_usd=float(cost.get(r.id, 0.0)),
        )
        for r in rows
    ]


def ladder_list(conn: Connection, *, limit: int = DEFAULT_LIST_LIMIT) -> list[LadderListing]:
    """The newest ``limit`` ladders, newest first, each with its runs so far."""
    rows = conn.execute(select(ladders).order_by(ladders.c.id.desc()).limit(limit)).all()
    if not rows:
        return []
    ids = [r.id for r in rows]
    members: dict[int, list[int]] = {i: [] for i in ids}
    for ladder_id, run_id in conn.execute(
        select(runs.c.ladder_id, runs.c.id).where(runs.c.ladder_id.in_(ids)).order_by(runs.c.id)
    ):
        members[ladder_id].append(int(run_id))
    return [
        LadderListing(
            ladder_id=r.id,
            model=r.model,
            tiers=[str(t) for t in r.tiers],
            profiles=[str(p) for p in r.profiles],
            status=str(r.status),
            created_at=r.created_at,
            runs=members[r.id],
        )
        for r in rows
    ]
