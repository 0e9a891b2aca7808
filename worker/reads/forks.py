"""Forks next to their origins: turns, dollars and outcome of each from the fork point on.

A run's forks are the fork it is (if it is one) and the forks made of its sessions.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, or_, select
from sqlalchemy.engine import Connection

from worker.store.tables import runs, sessions, usage

__all__ = ["Branch", "ForkFigures", "fork_figures"]


@dataclass(frozen=True)
class Branch:
    """One side of a fork, counted from the fork's turn on."""

    run_id: int
    session_id: int
    model: str
    profile: str
    turns: int
    """Turns taken from the fork's turn on."""
    cost_usd: float
    """Usage dollars of those turns."""
    status: str
    outcome: str | None


@dataclass(frozen=True)
class ForkFigures:
    """A fork and its origin, side by side from the turn the fork went live at."""

    at_turn: int
    origin: Branch
    fork: Branch


def fork_figures(conn: Connection, run_id: int) -> tuple[ForkFigures, ...]:
    """The forks ``run_id`` is or has, oldest first."""
    own = select(sessions.c.id).where(sessions.c.run_id == run_id).scalar_subquery()
    rows = conn.execute(
        select(runs.c.id, runs.c.forked_from_session_id, runs.c.forked_at_turn)
        .where(
            runs.c.forked_at_turn.is_not(None),
            runs.c.forked_from_session_id.is_not(None),
            or_(runs.c.id == run_id, runs.c.forked_from_session_id.in_(own)),
        )
        .order_by(runs.c.id)
    ).all()
    found = []
    for fork_run, origin_session, at_turn in rows:
        fork_session = conn.execute(
            select(sessions.c.id).where(sessions.c.run_id == fork_run).limit(1)
        ).scalar_one()
        found.append(
            ForkFigures(
                at_turn=int(at_turn),
                origin=_branch(conn, int(origin_session), int(at_turn)),
                fork=_branch(conn, int(fork_session), int(at_turn)),
            )
        )
    return tuple(found)


def _branch(conn: Connection, session_id: int, at_turn: int) -> Branch:
    after = (usage.c.session_id == session_id) & (usage.c.turn_no >= at_turn)
    row = conn.execute(
        select(
            sessions.c.run_id,
            runs.c.model,
            runs.c.profile,
            sessions.c.status,
            sessions.c.outcome,
            select(func.count(usage.c.id)).where(after).scalar_subquery().label("turns"),
            select(func.coalesce(func.sum(usage.c.cost_usd), 0.0))
            .where(after)
            .scalar_subquery()
            .label("cost"),
        )
        .join(runs, runs.c.id == sessions.c.run_id)
        .where(sessions.c.id == session_id)
    ).one()
    return Branch(
        run_id=int(row.run_id),
        session_id=session_id,
        model=row.model,
        profile=row.profile,
        turns=int(row.turns),
        cost_usd=float(row.cost),
        status=row.status,
        outcome=row.outcome,
    )
