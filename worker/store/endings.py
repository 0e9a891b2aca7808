"""Endings: a session ends once, is counted once on its wave's barrier, and the wave that
is full is closed once.

A session ends in its turn's (or verdict's) transaction. Once that has committed, its
ending is counted on its wave (:func:`count_endings`): a statement of its own, which marks
the session counted and adds it to the wave's ``done_count`` together, so an ending is never
counted twice. Whoever then finds the wave full closes it (:func:`close_full_waves`): the
wave's status changes once, and that caller writes the outbox row of the next wave (or ends
the run, and starts the next run of its ladder). A worker that dies between the commit and
the count leaves the ending to a reconciler, which counts endings older than a few seconds
and closes full waves left open.

Counting in the ending's own transaction made every session of a wave wait, row-locked,
for the commit of the one before it, round trip to its worker included: at thousands of
sessions ending together in a busy worker, seconds each, with their database connections
held.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql.dml import Update
from sqlalchemy.sql.elements import ColumnElement

from worker.states import TERMINAL, Outcome, RunStatus, SessionStatus, WaveStatus
from worker.store import reservations
from worker.store.due import ACTIVE
from worker.store.engine import notify_run
from worker.store.tables import outbox, runs, sessions, waves
from worker.store.waves import next_in_ladder, wave_start

__all__ = [
    "SessionEnd",
    "close_full_waves",
    "count_endings",
    "end_session",
    "record_run_stop",
    "start_repair",
]

#: Session statuses after which its ending is counted.
_TERMINAL = tuple(sorted(s.value for s in TERMINAL))


@dataclass(frozen=True)
class SessionEnd:
    """A session that has just ended (:func:`end_session`); once its transaction commits,
    :func:`count_endings` counts it on its wave."""

    session_id: int


def _ending(*conditions: ColumnElement[bool]) -> Update:
    return (
        update(sessions)
        .where(
            sessions.c.id == bindparam("b_session_id"),
            sessions.c.status.in_(ACTIVE),
            *conditions,
        )
        .values(
            status=bindparam("b_status", type_=sessions.c.status.type),
            outcome=bindparam("b_outcome", type_=sessions.c.outcome.type),
            error=bindparam("b_error", type_=sessions.c.error.type),
            finished_at=bindparam("b_now", type_=sessions.c.finished_at.type),
            lease_owner=None,
            lease_expires_at=None,
        )
        .returning(sessions.c.run_id)
    )


# Every session ends once: built once, their SQL compiled once.
_END_SESSION = _ending()

_END_LEASED_SESSION = _ending(sessions.c.lease_epoch == bindparam("b_epoch"))


def end_session(
    conn: Connection,
    *,
    session_id: int,
    outcome: Outcome,
    now: datetime,
    error: str | None = None,
    epoch: int | None = None,
) -> SessionEnd | None:
    """End an active session with ``outcome``; count it with :func:`count_endings` once the
    transaction has committed.

    The outcome decides the terminal status. With ``epoch``, only the lease holder may end
    it. Returns None when the session had already ended (or the lease moved on), so an
    ending is recorded exactly once.
    """
    run_id = conn.execute(
        _END_SESSION if epoch is None else _END_LEASED_SESSION,
        {
            "b_session_id": session_id,
            "b_epoch": epoch,
            "b_status": outcome.status.value,
            "b_outcome": outcome.value,
            "b_error": error,
            "b_now": now,
        },
    ).scalar()
    if run_id is None:
        return None
    notify_run(conn, run_id)
    return SessionEnd(session_id)


def _uncounted(
    session_ids: Sequence[int] | None, ended_before: datetime | None
) -> list[ColumnElement[bool]]:
    where: list[ColumnElement[bool]] = [
        sessions.c.counted.is_(False),
        sessions.c.status.in_(_TERMINAL),
    ]
    if session_ids is not None:
        where.append(sessions.c.id.in_(session_ids))
    if ended_before is not None:
        where.append(sessions.c.finished_at < ended_before)
    return where


def _count_pg(
    conn: Connection, session_ids: Sequence[int] | None, ended_before: datetime | None
) -> list[int]:
    """Count the endings in one autocommitted statement; returns the waves now full."""
    mine = (
        update(sessions)
        .where(*_uncounted(session_ids, ended_before))
        .values(counted=True)
        .returning(sessions.c.wave_id)
        .cte("mine")
    )
    per_wave = (
        select(mine.c.wave_id, func.count().label("n")).group_by(mine.c.wave_id).cte("per_wave")
    )
    counted = (
        update(waves)
        .where(waves.c.id == per_wave.c.wave_id)
        .values(done_count=func.least(waves.c.size, waves.c.done_count + per_wave.c.n))
        .returning(waves.c.id, waves.c.done_count, waves.c.size)
        .add_cte(mine)
        .add_cte(per_wave)
    )
    with conn.execution_options(isolation_level="AUTOCOMMIT").begin():
        rows = conn.execute(counted).all()
    return [r.id for r in rows if r.done_count >= r.size]


def _count_one_by_one(
    conn: Connection, session_ids: Sequence[int] | None, ended_before: datetime | None
) -> list[int]:
    """Count the endings in a transaction (SQLite: one writer at a time, no lock to wait on)."""
    full = []
    with conn.begin():
        counted = conn.execute(
            update(sessions)
            .where(*_uncounted(session_ids, ended_before))
            .values(counted=True)
            .returning(sessions.c.wave_id)
        ).scalars()
        for wave_id, n in Counter(counted).items():
            row = conn.execute(
                update(waves)
                .where(waves.c.id == wave_id)
                .values(done_count=func.min(waves.c.size, waves.c.done_count + n))
                .returning(waves.c.done_count, waves.c.size)
            ).one()
            if row.done_count >= row.size:
                full.append(wave_id)
    return full


def count_endings(
    engine: Engine,
    *,
    now: datetime,
    session_ids: Sequence[int] | None = None,
    ended_before: datetime | None = None,
) -> bool:
    """Count sessions whose ending has committed on their waves' barriers, each once, and
    close every wave that is full (:func:`close_full_waves`).

    On PostgreSQL the count is one statement in a transaction of its own: the wave's row is
    locked only while the server runs it, never across a round trip to a worker, so the
    thousands of sessions of a wave that end together wait for one another only that long.
    An ending its worker did not count (it died after the commit) is counted by a
    reconciler (``ended_before``).

    Args:
        engine: The database.
        now: When the waves it fills finished.
        session_ids: Count these sessions' endings (None: every uncounted one).
        ended_before: Count only endings older than this.

    Returns:
        Whether a wave closed: its successor may be in the outbox.
    """
    with engine.connect() as conn:
        count = _count_pg if conn.dialect.name == "postgresql" else _count_one_by_one
        full = count(conn, session_ids, ended_before)
        if not full:
            return False
        with conn.begin():
            return close_full_waves(conn, wave_ids=full, now=now)


def close_full_waves(
    conn: Connection, *, now: datetime, wave_ids: Sequence[int] | None = None
) -> bool:
    """Close the waves whose every session ended and was counted, and start what follows.

    Exactly one caller closes a wave (its status changes once): it writes the outbox row of
    the next wave, or ends the run and starts the next run of its ladder. Returns whether it
    closed any.
    """
    closing = update(waves).where(
        waves.c.status != WaveStatus.finished.value, waves.c.done_count >= waves.c.size
    )
    if wave_ids is not None:
        closing = closing.where(waves.c.id.in_(wave_ids))
    closed = conn.execute(
        closing.values(status=WaveStatus.finished.value, finished_at=now).returning(
            waves.c.run_id, waves.c.index
        )
    ).all()
    for run_id, index in sorted(closed):
        _after_wave(conn, run_id=run_id, index=index, now=now)
    return bool(closed)


def start_repair(conn: Connection, *, session_id: int, repair_round: int, now: datetime) -> None:
    """Send a verifying session back to work on ``repair_round`` (the verifier rejected it)."""
    conn.execute(
        update(sessions)
        .where(sessions.c.id == session_id, sessions.c.status == SessionStatus.verifying.value)
        .values(
            status=SessionStatus.running.value,
            repair_round=repair_round,
            dispatched_at=now,
            lease_owner=None,
            lease_expires_at=None,
        )
    )


def record_run_stop(conn: Connection, *, session_id: int, reason: str) -> None:
    """Record why a session's run stopped early, unless a reason is recorded already."""
    run_id = select(sessions.c.run_id).where(sessions.c.id == session_id).scalar_subquery()
    conn.execute(
        update(runs)
        .where(runs.c.id == run_id, runs.c.stop_reason.is_(None))
        .values(stop_reason=reason)
    )


def _after_wave(conn: Connection, *, run_id: int, index: int, now: datetime) -> None:
    """What follows wave ``index`` of a run: its next wave, or the run's end."""
    notify_run(conn, run_id)
    has_next = conn.execute(
        select(waves.c.id).where(waves.c.run_id == run_id, waves.c.index == index + 1)
    ).first()
    run_status, budget_usd = conn.execute(
        select(runs.c.status, runs.c.budget_usd).where(runs.c.id == run_id)
    ).one()
    if has_next is not None and run_status == RunStatus.running.value:
        conn.execute(insert(outbox).values(wave_start(run_id, index + 1, now)))
    elif run_status == RunStatus.running.value:
        conn.execute(
            update(runs)
            .where(runs.c.id == run_id)
            .values(status=RunStatus.finished.value, finished_at=now)
        )
        next_in_ladder(conn, run_id=run_id, now=now)
    elif run_status == RunStatus.cancelled.value and not _any_active(conn, run_id):
        conn.execute(update(runs).where(runs.c.id == run_id).values(finished_at=now))
    if budget_usd is not None and not _any_active(conn, run_id):
        # No call of the run is out any more: what it still holds (calls whose outcome
        # was never known) goes back.
        reservations.release_run(conn, run_id=run_id)


def _any_active(conn: Connection, run_id: int) -> bool:
    return (
        conn.execute(
            select(sessions.c.id)
            .where(sessions.c.run_id == run_id, sessions.c.status.in_(ACTIVE))
            .limit(1)
        ).first()
        is not None
    )
