"""Endings: a session ends once, counted on its wave's barrier; the last one closes the wave.

The barrier's UPDATE row-locks the wave, so exactly one session sees it full: that last
finisher closes the wave and writes the outbox row of the next (or ends the run, and starts
the next run of its ladder).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.sql.dml import Update
from sqlalchemy.sql.elements import ColumnElement

from worker.states import Outcome, RunStatus, SessionStatus, WaveStatus
from worker.store import reservations
from worker.store.due import ACTIVE
from worker.store.engine import notify_run
from worker.store.tables import outbox, runs, sessions, waves
from worker.store.waves import next_in_ladder, wave_start

__all__ = ["SessionEnd", "end_session", "record_run_stop", "start_repair"]


@dataclass(frozen=True)
class SessionEnd:
    """A session that has just ended (:func:`end_session`)."""

    wave_closed: bool
    """It was the last of its wave: the wave's successor (the next wave, or the next run
    of a ladder) may be in the outbox now."""


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
        .returning(sessions.c.wave_id, sessions.c.run_id)
    )


# Every session ends once: built once, their SQL compiled once.
_END_SESSION = _ending()

_END_LEASED_SESSION = _ending(sessions.c.lease_epoch == bindparam("b_epoch"))

_COUNT_ON_BARRIER = (
    update(waves)
    .where(waves.c.id == bindparam("b_wave_id"))
    .values(done_count=waves.c.done_count + 1)
    .returning(waves.c.done_count, waves.c.size, waves.c.index.label("wave_index"))
)


def end_session(
    conn: Connection,
    *,
    session_id: int,
    outcome: Outcome,
    now: datetime,
    error: str | None = None,
    epoch: int | None = None,
) -> SessionEnd | None:
    """End an active session with ``outcome`` and count it on its wave's barrier.

    The outcome decides the terminal status. With ``epoch``, only the lease holder may end
    it. Returns None when the session had already ended (or the lease moved on), so an
    ending is recorded exactly once.
    """
    row = conn.execute(
        _END_SESSION if epoch is None else _END_LEASED_SESSION,
        {
            "b_session_id": session_id,
            "b_epoch": epoch,
            "b_status": outcome.status.value,
            "b_outcome": outcome.value,
            "b_error": error,
            "b_now": now,
        },
    ).first()
    if row is None:
        return None
    return SessionEnd(_count_on_barrier(conn, wave_id=row.wave_id, run_id=row.run_id, now=now))


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


def _count_on_barrier(conn: Connection, *, wave_id: int, run_id: int, now: datetime) -> bool:
    """Count a session's end on its wave; True when it was the last and closed the wave."""
    # Announced at commit wherever it is sent, so sent first: the wave row below stays
    # locked until the commit, and every session of the wave ending then waits for it.
    notify_run(conn, run_id)
    # The UPDATE row-locks the wave, so exactly one session sees done_count == size:
    # that last finisher closes the wave and writes the outbox row for the next one.
    wave = conn.execute(_COUNT_ON_BARRIER, {"b_wave_id": wave_id}).one()
    if wave.done_count < wave.size:
        return False
    conn.execute(
        update(waves)
        .where(waves.c.id == wave_id)
        .values(status=WaveStatus.finished.value, finished_at=now)
    )
    has_next = conn.execute(
        select(waves.c.id).where(waves.c.run_id == run_id, waves.c.index == wave.wave_index + 1)
    ).first()
    run_status, budget_usd = conn.execute(
        select(runs.c.status, runs.c.budget_usd).where(runs.c.id == run_id)
    ).one()
    if has_next is not None and run_status == RunStatus.running.value:
        conn.execute(insert(outbox).values(wave_start(run_id, wave.wave_index + 1, now)))
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
    return True


def _any_active(conn: Connection, run_id: int) -> bool:
    return (
        conn.execute(
            select(sessions.c.id)
            .where(sessions.c.run_id == run_id, sessions.c.status.in_(ACTIVE))
            .limit(1)
        ).first()
        is not None
    )
