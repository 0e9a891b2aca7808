"""Reads of a run's sessions: the latest run, and one row per session with what it took.

A run's figures as a whole (``status``, ``report``) are read by
``worker.reads.figures``, which builds on :func:`per_session`.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Subquery, func, select
from sqlalchemy.engine import Connection

from worker.states import Outcome, SessionStatus
from worker.store.tables import artifact_versions, artifacts, events, runs, sessions, usage, waves

__all__ = ["ERROR_EVENTS", "SessionRow", "latest_run_id", "per_session", "session_rows"]

#: Event kinds that count as a session's errors: tool errors and the nudges of the loop guard.
ERROR_EVENTS = ("tool_error", "nudge")


@dataclass(frozen=True)
class SessionRow:
    """One session: where it stands, how it ended, what it took and what it cost."""

    id: int
    index: int
    wave: int
    """Index of the session's wave in its run."""
    persona: str
    instance: str
    """The task instance it played."""
    status: SessionStatus
    outcome: Outcome | None
    """Why it ended; None while it runs."""
    turns: int
    versions: int
    """Artifact versions the session wrote."""
    errors: int
    """Tool errors and nudges (:data:`ERROR_EVENTS`)."""
    repair_rounds: int
    cost_usd: float
    error: str | None


def latest_run_id(conn: Connection) -> int | None:
    """The id of the most recent run, if any."""
    value = conn.execute(select(func.max(runs.c.id))).scalar()
    return int(value) if value is not None else None


def per_session(run_id: int) -> Subquery:
    """Turns and usage dollars of each of the run's sessions, joined by session only."""
    ids = select(sessions.c.id).where(sessions.c.run_id == run_id)
    return (
        select(
            usage.c.session_id,
            func.count().label("turns"),
            func.sum(usage.c.cost_usd).label("cost"),
        )
        .where(usage.c.session_id.in_(ids))
        .group_by(usage.c.session_id)
        .subquery()
    )


def session_rows(conn: Connection, run_id: int) -> list[SessionRow]:
    """One row per session of the run, in session order."""
    cost = per_session(run_id)
    versions = (
        select(artifacts.c.session_id, func.count(artifact_versions.c.id).label("n"))
        .join(artifact_versions)
        .where(artifact_versions.c.version > 0)
        .group_by(artifacts.c.session_id)
        .subquery()
    )
    errors = (
        select(events.c.session_id, func.count().label("n"))
        .where(events.c.kind.in_(ERROR_EVENTS))
        .group_by(events.c.session_id)
        .subquery()
    )
    rows = conn.execute(
        select(
            sessions.c.id,
            sessions.c.index.label("session_index"),
            waves.c.index.label("wave_index"),
            sessions.c.persona,
            sessions.c.instance_id,
            sessions.c.status,
            sessions.c.outcome,
            sessions.c.repair_round,
            sessions.c.error,
            func.coalesce(cost.c.turns, 0).label("turns"),
            func.coalesce(cost.c.cost, 0.0).label("cost"),
            func.coalesce(versions.c.n, 0).label("versions"),
            func.coalesce(errors.c.n, 0).label("errors"),
        )
        .join(waves, waves.c.id == sessions.c.wave_id)
        .outerjoin(cost, cost.c.session_id == sessions.c.id)
        .outerjoin(versions, versions.c.session_id == sessions.c.id)
        .outerjoin(errors, errors.c.session_id == sessions.c.id)
        .where(sessions.c.run_id == run_id)
        .order_by(sessions.c.index)
    ).all()
    return [
        SessionRow(
            id=r.id,
            index=r.session_index,
            wave=r.wave_index,
            persona=r.persona,
            instance=r.instance_id,
            status=SessionStatus(r.status),
            outcome=Outcome(r.outcome) if r.outcome is not None else None,
            turns=int(r.turns),
            versions=int(r.versions),
            errors=int(r.errors),
            repair_rounds=r.repair_round,
            cost_usd=round(float(r.cost), 6),
            error=r.error,
        )
        for r in rows
    ]
