"""A turn in the store: its claim, with what it reads; its commit, with what it writes.

:func:`claim_turn` takes the session's lease and reads the session, its run and its event
log (only what follows the caller's mark, :mod:`worker.store.eventlog`); on PostgreSQL that
is one statement, run outside a transaction (it is atomic on its own): one round trip
instead of five with BEGIN and COMMIT. The commit transaction of a turn first locks the
session row under the turn's lease (:func:`holds_lease`), so a stale worker finds its epoch
superseded before it touches anything. The tools then run, and :func:`commit_turn` writes
what the turn produced (its events, usage row and timing row) together with the fence that
advances ``next_turn``. On PostgreSQL that is one statement, the inserts as data-modifying
CTEs of the fence's UPDATE: a turn's rows cost one round trip, not four. In a run with a
budget the same statement settles the model call's reservation
(:mod:`worker.store.reservations`): the hold is released and the billed cost spent only if
the fence passes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    Integer,
    Table,
    bindparam,
    cast,
    delete,
    exists,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.engine import Connection
from sqlalchemy.sql.selectable import CTE

from worker.states import SessionStatus
from worker.store import blobs, claims, eventlog, reservations
from worker.store.claims import CLAIM_TURN, Claim
from worker.store.eventlog import LogMark
from worker.store.sessions import (
    RUN_TASK_COLUMNS,
    LogEntry,
    SessionView,
    add_events,
    add_timing,
    add_usage,
    load_session,
)
from worker.store.tables import events, runs, sessions, turn_timings, usage
from worker.store.tables import reservations as holds

__all__ = ["TurnRows", "claim_turn", "commit_turn", "holds_lease"]

_CLAIMED = CLAIM_TURN.returning(
    sessions.c.id,
    sessions.c.run_id,
    sessions.c.index.label("session_index"),
    sessions.c.persona,
    sessions.c.instance_id,
    sessions.c.brief,
    sessions.c.status,
    sessions.c.next_turn,
    sessions.c.repair_round,
).cte("claimed")
#: PostgreSQL: the claim, the session and its run, and the event log after the caller's mark
#: as one JSON array, with whether the mark still holds.
_CLAIM_AND_LOAD_PG = select(
    _CLAIMED,
    runs.c.model,
    runs.c.profile,
    runs.c.config,
    runs.c.status.label("run_status"),
    runs.c.budget_usd,
    *RUN_TASK_COLUMNS,
    eventlog.log_after(_CLAIMED.c.id).label("log"),
    eventlog.mark_holds(_CLAIMED.c.id).label("mark_holds"),
).join(runs, runs.c.id == _CLAIMED.c.run_id)


def claim_turn(
    conn: Connection,
    *,
    session_id: int,
    turn_no: int,
    owner: str,
    now: datetime,
    ttl_s: float,
    since: LogMark | None = None,
) -> tuple[Claim, SessionView] | None:
    """Take the session's lease for ``turn_no`` and read what the turn needs, at once.

    Args:
        conn: A connection outside any transaction; the claim is committed on return.
        session_id: The session.
        turn_no: The turn the task was sent for.
        owner: This process's lease owner name.
        now: The claim's time.
        ttl_s: How long the lease lasts unless renewed.
        since: The last event the caller has read of the log: on PostgreSQL only the events
            after it are read, if it is still the same row (the view's ``log_after`` says).

    Returns:
        The claim and the session as the turn reads it, or None when the turn is not due
        (see :func:`worker.store.claims.lease_turn`).
    """
    if conn.dialect.name != "postgresql":
        with conn.begin():
            claim = claims.lease_turn(
                conn, session_id=session_id, turn_no=turn_no, owner=owner, now=now, ttl_s=ttl_s
            )
            return None if claim is None else (claim, load_session(conn, session_id=session_id))
    expires_at = now + timedelta(seconds=ttl_s)
    params = claims.lease_params(
        session_id=session_id, number=turn_no, owner=owner, now=now, expires_at=expires_at
    )
    with conn.execution_options(isolation_level="AUTOCOMMIT").begin():
        row = conn.execute(_CLAIM_AND_LOAD_PG, params | eventlog.mark_params(since)).first()
        if row is not None and since is not None and not row.mark_holds:
            # The log was rewritten under the mark (a fork rebuilt, a database refilled).
            since, log = None, eventlog.read_log(conn, session_id=session_id)
        elif row is not None:
            log = row.log or []
    if row is None:
        return None
    read = eventlog.rows_of(log, after=since, next_turn=row.next_turn)
    claim = Claim(
        session_id, turn_no, row.lease_epoch, row.turn_attempts, expires_at, row.dispatched_at
    )
    view = SessionView(
        id=row.id,
        run_id=row.run_id,
        index=row.session_index,
        persona=row.persona,
        instance_id=row.instance_id,
        brief=row.brief,
        status=row.status,
        next_turn=row.next_turn,
        repair_round=row.repair_round,
        model=row.model,
        profile=row.profile,
        run_config=row.config,
        run_status=row.run_status,
        run_budget_usd=row.budget_usd,
        events=read.events,
        task_ref=row.task_ref,
        task_version=row.task_version,
        task_sha256=row.task_sha256,
        next_seq=read.next_seq,
        log_after=since,
        log_tail=read.tail,
    )
    return claim, view


_HOLDS_LEASE = (
    select(sessions.c.id)
    .where(
        sessions.c.id == bindparam("b_session_id"),
        sessions.c.lease_epoch == bindparam("b_epoch"),
        sessions.c.next_turn == bindparam("b_turn_no"),
    )
    .with_for_update()
)


def holds_lease(conn: Connection, *, claim: Claim) -> bool:
    """True while ``claim`` is the session's current lease (locks the row on PostgreSQL)."""
    row = conn.execute(
        _HOLDS_LEASE,
        {"b_session_id": claim.session_id, "b_epoch": claim.epoch, "b_turn_no": claim.turn_no},
    ).first()
    return row is not None


@dataclass(frozen=True)
class TurnRows:
    """What one committed turn adds to the store besides its tools' effects."""

    run_id: int
    items: Sequence[LogEntry]
    """The turn's events, in order."""
    first_seq: int
    """Sequence number of the first of them within the turn."""
    usage: dict[str, Any]
    """Columns of the usage row (model, tokens by kind, cost, price date, latency)."""
    timing: dict[str, Any]
    """Columns of the timing row (``TurnTimer.row``)."""
    budgeted: bool = False
    """The run has a budget: the commit spends the turn's cost on it and settles the
    call's reservation (:mod:`worker.store.reservations`)."""


#: The commit point of a turn: built once.
_FENCE_TURN = (
    update(sessions)
    .where(
        sessions.c.id == bindparam("b_session_id"),
        sessions.c.lease_epoch == bindparam("b_epoch"),
        sessions.c.next_turn == bindparam("b_turn_no"),
        sessions.c.status == SessionStatus.running.value,
    )
    .values(
        next_turn=sessions.c.next_turn + 1,
        turn_attempts=0,
        lease_owner=None,
        lease_expires_at=None,
        dispatched_at=bindparam("b_now", type_=sessions.c.dispatched_at.type),
        status=bindparam("b_status", type_=sessions.c.status.type),
        handoff_version_id=func.coalesce(
            bindparam("b_handoff", type_=sessions.c.handoff_version_id.type),
            sessions.c.handoff_version_id,
        ),
    )
)
_USAGE_COLUMNS = tuple(
    c.name for c in usage.c if c.name not in ("id", "session_id", "run_id", "turn_no")
)
_TIMING_COLUMNS = tuple(
    c.name for c in turn_timings.c if c.name not in ("id", "session_id", "run_id", "turn_no")
)
_SESSION_ID = bindparam("b_session_id", type_=BigInteger)
_RUN_ID = bindparam("b_run_id", type_=BigInteger)
_TURN_NO = bindparam("b_turn_no", type_=Integer)
#: The turn's events as one JSON parameter, serialised once: an array of text would be
#: escaped element by element, quote by quote, in Python.
_EVENT_ROWS = eventlog.EVENT_ROWS
_FENCED = _FENCE_TURN.returning(sessions.c.id).cte("fenced")
#: Each insert reads the fence's result, so it waits for the fence and adds nothing if the
#: lease moved on: the statement writes all of the turn or none of it.
_IF_FENCED = exists(select(_FENCED.c.id))


def _added(table: Table, prefix: str, columns: tuple[str, ...], name: str) -> CTE:
    # Cast: an untyped NULL (a timing the turn did not take) would be read as text.
    types = [table.c[c].type for c in columns]
    values = [
        cast(bindparam(f"{prefix}{c}", type_=t), t) for c, t in zip(columns, types, strict=True)
    ]
    return (
        insert(table)
        .from_select(
            ["session_id", "run_id", "turn_no", *columns],
            select(_SESSION_ID, _RUN_ID, _TURN_NO, *values).where(_IF_FENCED),
        )
        .cte(name)
    )


#: PostgreSQL: the fence and the turn's events, usage and timing rows in one statement.
_COMMIT_TURN_PG = (
    select(func.count())
    .select_from(_FENCED)
    .add_cte(
        insert(events)
        .from_select(
            ["session_id", "turn_no", "seq", "kind", "payload", "blobs", "created_at"],
            select(
                _SESSION_ID,
                _TURN_NO,
                _EVENT_ROWS.c.seq,
                _EVENT_ROWS.c.kind,
                _EVENT_ROWS.c.payload,
                _EVENT_ROWS.c.blobs,
                bindparam("b_created_at", type_=events.c.created_at.type),
            ).where(_IF_FENCED),
        )
        .cte("turn_events_added"),
        # The texts the events set apart, stored once (:mod:`worker.store.blobs`).
        blobs.added_cte("x_blobs", where=_IF_FENCED, name="turn_blobs_added"),
        _added(usage, "u_", _USAGE_COLUMNS, "turn_usage_added"),
        _added(turn_timings, "t_", _TIMING_COLUMNS, "turn_timing_added"),
    )
)


_RELEASED = (
    delete(holds)
    .where(
        holds.c.session_id == _SESSION_ID,
        holds.c.turn_no == _TURN_NO,
        holds.c.lease_epoch == bindparam("b_epoch", type_=Integer),
        holds.c.state == reservations.HoldState.held.value,
        _IF_FENCED,
    )
    .returning(holds.c.amount_usd)
    .cte("hold_released")
)
#: PostgreSQL, a run with a budget: the commit settles the call's reservation too.
_COMMIT_AND_SETTLE_PG = _COMMIT_TURN_PG.add_cte(
    _RELEASED,
    update(runs)
    .where(runs.c.id == _RUN_ID, _IF_FENCED)
    .values(
        spent_usd=runs.c.spent_usd + bindparam("s_cost_usd", type_=runs.c.spent_usd.type),
        reserved_usd=runs.c.reserved_usd
        - select(func.coalesce(func.sum(_RELEASED.c.amount_usd), 0.0)).scalar_subquery(),
    )
    .cte("spend_settled"),
)


def commit_turn(
    conn: Connection,
    *,
    claim: Claim,
    rows: TurnRows,
    now: datetime,
    fenced_at: datetime,
    handoff_version_id: int | None = None,
) -> bool:
    """Write the turn's rows and advance ``next_turn``, if this worker holds the lease.

    Args:
        conn: The commit transaction, opened by :func:`holds_lease`.
        claim: The turn's lease.
        rows: The turn's events, usage and timing.
        now: When the rows were made.
        fenced_at: When the next step was decided: the next turn's queue wait starts here.
        handoff_version_id: The artifact version handed off in this turn; the session goes
            on to ``verifying`` it.

    Returns:
        False when the lease moved on. On PostgreSQL nothing was written then; on SQLite the
        rows were, and the caller rolls the transaction back.
    """
    status = SessionStatus.running if handoff_version_id is None else SessionStatus.verifying
    fence = {
        "b_session_id": claim.session_id,
        "b_epoch": claim.epoch,
        "b_turn_no": claim.turn_no,
        "b_now": fenced_at,
        "b_status": status.value,
        "b_handoff": handoff_version_id,
    }
    if conn.dialect.name != "postgresql":
        add_events(
            conn,
            session_id=claim.session_id,
            turn_no=claim.turn_no,
            items=rows.items,
            now=now,
            first_seq=rows.first_seq,
        )
        keys = {"session_id": claim.session_id, "run_id": rows.run_id, "turn_no": claim.turn_no}
        add_usage(conn, **keys, values=rows.usage, now=now)
        add_timing(conn, **keys, values=rows.timing)
        if conn.execute(_FENCE_TURN, fence).rowcount != 1:
            return False
        if rows.budgeted:
            reservations.settle(
                conn,
                run_id=rows.run_id,
                session_id=claim.session_id,
                turn_no=claim.turn_no,
                epoch=claim.epoch,
                cost_usd=float(rows.usage["cost_usd"]),
            )
        return True
    params = {
        **fence,
        "b_run_id": rows.run_id,
        "b_created_at": now,
        **eventlog.stored_rows(
            [(item.kind.value, item.to_payload()) for item in rows.items],
            first_seq=rows.first_seq,
            known=blobs.stored_here(conn),
        ),
        **{f"u_{c}": rows.usage.get(c) for c in _USAGE_COLUMNS},
        **{f"t_{c}": rows.timing.get(c) for c in _TIMING_COLUMNS},
    }
    params["u_created_at"] = now
    if not rows.budgeted:
        return conn.execute(_COMMIT_TURN_PG, params).scalar_one() == 1
    params["s_cost_usd"] = rows.usage["cost_usd"]
    return conn.execute(_COMMIT_AND_SETTLE_PG, params).scalar_one() == 1
