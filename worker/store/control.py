"""A user's hand on a run: cancel it (or a whole ladder), or resume what has not ended.

This module checks what a user asked for, then makes the transitions it needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import case, select, update
from sqlalchemy.engine import Connection

from worker.errors import InputError, LadderNotFound, RunNotFound
from worker.states import Outcome, RunStatus, SessionStatus
from worker.store import claims, due, endings, waves
from worker.store.due import DUE_COLUMNS, Dispatch, dispatch_of
from worker.store.tables import ladders, runs, sessions


@dataclass(frozen=True)
class Cancelled:
    """What ``cancel`` did: sessions ended at once, and those finishing a turn first."""

    ended: int
    in_flight: int


def cancel_run(conn: Connection, *, run_id: int, now: datetime) -> Cancelled:
    """Cancel a run: no new turn or wave starts, and its sessions end ``cancelled``.

    A session whose turn is in flight (its lease is live) is left to finish that turn, so
    the call it is paying for is recorded; it ends when it would start the next one. The
    sessions it ends are counted on their waves once the transaction has committed
    (:func:`worker.store.endings.count_endings`).

    Raises:
        RunNotFound: no such run.
        InputError: the run has already finished.
    """
    status = _status(conn, run_id)
    if status in (RunStatus.finished.value, RunStatus.stopped.value):
        raise InputError(f"run {run_id} has already finished")
    _mark_cancelled(conn, run_id=run_id, reason="cancelled by a user")
    rows = conn.execute(
        select(sessions.c.id, sessions.c.status, (~claims.lease_free(now)).label("leased"))
        .where(sessions.c.run_id == run_id, sessions.c.status.in_(due.ACTIVE))
        .with_for_update(of=sessions)
    ).all()
    ended = in_flight = 0
    for row in rows:
        if row.status == SessionStatus.running.value and row.leased:
            in_flight += 1
        elif endings.end_session(
            conn,
            session_id=row.id,
            now=now,
            outcome=Outcome.cancelled,
            error="the run was cancelled",
        ):
            ended += 1
    return Cancelled(ended, in_flight)


def cancel_ladder(conn: Connection, *, ladder_id: int, now: datetime) -> Cancelled:
    """Cancel a ladder: its running run as :func:`cancel_run` does, and every run to come.

    Raises:
        LadderNotFound: no such ladder.
        InputError: the ladder has already finished.
    """
    status = conn.execute(select(ladders.c.status).where(ladders.c.id == ladder_id)).scalar()
    if status is None:
        raise LadderNotFound(f"no ladder L{ladder_id}")
    if status == RunStatus.finished.value:
        raise InputError(f"ladder L{ladder_id} has already finished")
    _mark_ladder_cancelled(conn, ladder_id=ladder_id)
    open_runs = (
        conn.execute(
            select(runs.c.id)
            .where(
                runs.c.ladder_id == ladder_id,
                runs.c.status.in_([RunStatus.pending.value, RunStatus.running.value]),
            )
            .order_by(runs.c.id)
        )
        .scalars()
        .all()
    )
    done = [cancel_run(conn, run_id=run_id, now=now) for run_id in open_runs]
    return Cancelled(sum(d.ended for d in done), sum(d.in_flight for d in done))


def resume_run(conn: Connection, *, run_id: int, now: datetime) -> list[due.Dispatch]:
    """Dispatch again every session of a run that has not ended, and any wave start due.

    A cancelled run becomes running again for the sessions it still has; ended sessions
    stay as they are.

    Raises:
        RunNotFound: no such run.
        InputError: the run has already finished.
    """
    if _status(conn, run_id) in (RunStatus.finished.value, RunStatus.stopped.value):
        raise InputError(f"run {run_id} has already finished; nothing to resume")
    dispatches = _reopen(conn, run_id=run_id, now=now)
    return dispatches + waves.take_outbox(conn, now=now, run_id=run_id)


def _status(conn: Connection, run_id: int) -> str:
    status = conn.execute(select(runs.c.status).where(runs.c.id == run_id)).scalar()
    if status is None:
        raise RunNotFound(f"no run {run_id}")
    return str(status)


def _mark_cancelled(conn: Connection, *, run_id: int, reason: str) -> None:
    """Mark a run cancelled: no new turn or wave starts (a second cancel keeps the reason)."""
    already = runs.c.status == RunStatus.cancelled.value
    conn.execute(
        update(runs)
        .where(runs.c.id == run_id)
        .values(
            status=RunStatus.cancelled.value,
            stop_reason=case((already, runs.c.stop_reason), else_=reason),
        )
    )


def _mark_ladder_cancelled(conn: Connection, *, ladder_id: int) -> None:
    """Mark a ladder cancelled: none of its pending runs will start."""
    conn.execute(
        update(ladders).where(ladders.c.id == ladder_id).values(status=RunStatus.cancelled.value)
    )


def _reopen(conn: Connection, *, run_id: int, now: datetime) -> list[Dispatch]:
    """Make a cancelled run run again, and dispatch every session of it that has not ended."""
    conn.execute(
        update(runs)
        .where(runs.c.id == run_id, runs.c.status == RunStatus.cancelled.value)
        .values(status=RunStatus.running.value, stop_reason=None)
    )
    rows = conn.execute(
        update(sessions)
        .where(
            sessions.c.run_id == run_id,
            sessions.c.status.in_([SessionStatus.running.value, SessionStatus.verifying.value]),
        )
        .values(dispatched_at=now)
        .returning(*DUE_COLUMNS)
    ).all()
    return [dispatch_of(row) for row in sorted(rows)]
