"""Claims: a turn or a verification takes its session's lease, and gives it back.

A lease is held by one worker until ``lease_expires_at``; taking it bumps ``lease_epoch``,
which fences whoever held it before (their commit matches no row). A lease also stays
held past that time while its owner's row of ``lease_holders`` is alive: a worker renews
that one row (:mod:`worker.fleet.leases`) instead of every lease it holds, and lets go of
a lease it stops holding by clearing the lease's owner, if a commit has not cleared the
lease already. Every function takes an open :class:`~sqlalchemy.engine.Connection` inside
the caller's transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, exists, select, update
from sqlalchemy.engine import Connection, Row
from sqlalchemy.sql.dml import Update
from sqlalchemy.sql.elements import ColumnElement

from worker.states import SessionStatus
from worker.store.tables import lease_holders, runs, sessions

__all__ = [
    "CLAIM_TURN",
    "CLAIM_VERIFICATION",
    "Claim",
    "claim_verification",
    "count_duplicate_turn",
    "lease_free",
    "lease_lapsed",
    "lease_params",
    "lease_turn",
    "release_turn",
    "release_verification",
]


@dataclass(frozen=True)
class Claim:
    """A turn (or a verification round, as ``turn_no``) this worker owns until
    ``expires_at``, fenced by ``epoch``."""

    session_id: int
    turn_no: int
    epoch: int
    attempts: int
    expires_at: datetime
    dispatched_at: datetime | None = None
    """When the task that claimed it was dispatched (before the claim), if recorded."""


def kept_by_its_owner(now: ColumnElement[datetime] | datetime) -> ColumnElement[bool]:
    """A lease whose owner is alive at ``now`` (its ``lease_holders`` row)."""
    return exists().where(
        lease_holders.c.owner == sessions.c.lease_owner,
        lease_holders.c.alive_until >= now,
    )


def lease_lapsed(now: ColumnElement[datetime] | datetime) -> ColumnElement[bool]:
    """A session lease taken and lapsed at ``now``: past its own expiry, and its owner no
    longer alive. A lease given back (no expiry) has not lapsed: it is free."""
    return (sessions.c.lease_expires_at < now) & ~kept_by_its_owner(now)


def lease_free(now: ColumnElement[datetime] | datetime) -> ColumnElement[bool]:
    """A session lease that no one holds at ``now``: never taken, given back, or lapsed."""
    return sessions.c.lease_expires_at.is_(None) | lease_lapsed(now)


#: The time a claim statement is made at.
_NOW = bindparam("b_now", type_=sessions.c.lease_expires_at.type)


def _take_lease(*conditions: ColumnElement[bool], **values: Any) -> Update:
    """The statement that moves the lease of the session ``conditions`` pick to an owner
    (bound as ``b_owner``, until ``b_expires_at``), if it is free at ``b_now``.

    A lease is free when no one holds it or it lapsed; taking it bumps the epoch, which
    fences whoever held it before. Built once per kind of claim: a turn runs it every time.
    """
    return (
        update(sessions)
        .where(
            *conditions,
            lease_free(_NOW),
        )
        .values(
            lease_epoch=sessions.c.lease_epoch + 1,
            lease_owner=bindparam("b_owner", type_=sessions.c.lease_owner.type),
            lease_expires_at=bindparam("b_expires_at", type_=sessions.c.lease_expires_at.type),
            **values,
        )
        .returning(sessions.c.lease_epoch, sessions.c.turn_attempts, sessions.c.dispatched_at)
    )


#: A turn's claim, which :mod:`worker.store.turns` also reads its session through.
CLAIM_TURN = _take_lease(
    sessions.c.id == bindparam("b_session_id"),
    sessions.c.next_turn == bindparam("b_number"),
    sessions.c.status == SessionStatus.running.value,
    turn_attempts=sessions.c.turn_attempts + 1,
)

#: A verification's claim, which the verdict path also reads its handoff through.
CLAIM_VERIFICATION = _take_lease(
    sessions.c.id == bindparam("b_session_id"),
    sessions.c.repair_round == bindparam("b_number"),
    sessions.c.status == SessionStatus.verifying.value,
)


def lease_params(
    *, session_id: int, number: int, owner: str, now: datetime, expires_at: datetime
) -> dict[str, Any]:
    """The parameters of a claim statement (:data:`CLAIM_TURN` and its like)."""
    return {
        "b_session_id": session_id,
        "b_number": number,
        "b_now": now,
        "b_owner": owner,
        "b_expires_at": expires_at,
    }


def _claim(
    conn: Connection,
    statement: Update,
    *,
    session_id: int,
    number: int,
    owner: str,
    now: datetime,
    expires_at: datetime,
) -> Row[Any] | None:
    params = lease_params(
        session_id=session_id, number=number, owner=owner, now=now, expires_at=expires_at
    )
    return conn.execute(statement, params).first()


def lease_turn(
    conn: Connection, *, session_id: int, turn_no: int, owner: str, now: datetime, ttl_s: float
) -> Claim | None:
    """Take the session lease for ``turn_no`` (``lease_epoch + 1``).

    Returns None when the turn is not due: already committed, session not running, or the
    lease is held by a live worker. That is how duplicated and late turn tasks do nothing.
    """
    expires_at = now + timedelta(seconds=ttl_s)
    row = _claim(
        conn,
        CLAIM_TURN,
        session_id=session_id,
        number=turn_no,
        owner=owner,
        now=now,
        expires_at=expires_at,
    )
    if row is None:
        return None
    return Claim(
        session_id, turn_no, row.lease_epoch, row.turn_attempts, expires_at, row.dispatched_at
    )


def count_duplicate_turn(conn: Connection, *, session_id: int) -> None:
    """Count on its run a turn task that found its turn not due (sent again, or late)."""
    run_id = select(sessions.c.run_id).where(sessions.c.id == session_id).scalar_subquery()
    conn.execute(
        update(runs)
        .where(runs.c.id == run_id)
        .values(duplicate_turn_tasks=runs.c.duplicate_turn_tasks + 1)
    )


def claim_verification(
    conn: Connection, *, session_id: int, round_no: int, owner: str, now: datetime, ttl_s: float
) -> Claim | None:
    """Take the session lease to judge what it handed off in ``round_no``.

    Returns None when that verification is not due: its verdict is recorded, or a live
    worker holds the lease. Only the holder may record the verdict.
    """
    expires_at = now + timedelta(seconds=ttl_s)
    row = _claim(
        conn,
        CLAIM_VERIFICATION,
        session_id=session_id,
        number=round_no,
        owner=owner,
        now=now,
        expires_at=expires_at,
    )
    if row is None:
        return None
    return Claim(session_id, round_no, row.lease_epoch, row.turn_attempts, expires_at)


def release_verification(
    conn: Connection, *, session_id: int, epoch: int, retry_at: datetime
) -> bool:
    """Hand a verification's lease back unjudged (the browser failed), before a retry."""
    result = conn.execute(
        update(sessions)
        .where(sessions.c.id == session_id, sessions.c.lease_epoch == epoch)
        .values(lease_owner=None, lease_expires_at=None, dispatched_at=retry_at)
    )
    return result.rowcount == 1


def release_turn(
    conn: Connection, *, claim: Claim, retry_at: datetime, counted: bool = True
) -> bool:
    """Hand the lease back without committing the turn, before a retry at ``retry_at``.

    ``turn_attempts`` counts claims that vanished without a commit or a release (a worker
    crashing on the turn), so a clean release gives its attempt back. A ``counted`` release
    (a model failure, not a wait for the fleet's limiter) adds to ``model_retries``.
    """
    result = conn.execute(
        update(sessions)
        .where(sessions.c.id == claim.session_id, sessions.c.lease_epoch == claim.epoch)
        .values(
            lease_owner=None,
            lease_expires_at=None,
            dispatched_at=retry_at,
            turn_attempts=sessions.c.turn_attempts - 1,
            model_retries=sessions.c.model_retries + (1 if counted else 0),
        )
    )
    return result.rowcount == 1
