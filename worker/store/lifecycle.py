"""Session lifecycle in the database: leases, fencing, endings and the wave barrier.

Every function takes an open :class:`~sqlalchemy.engine.Connection` inside the caller's
transaction, so a turn's effects commit or vanish together.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, case, insert, or_, select, tuple_, update
from sqlalchemy.engine import Connection, Row
from sqlalchemy.sql.dml import Update
from sqlalchemy.sql.elements import ColumnElement

from worker.states import TERMINAL, Outcome, RunStatus, SessionStatus, WaveStatus
from worker.store.engine import notify_run
from worker.store.forecast import forecast
from worker.store.tables import ladders, outbox, runs, sessions, waves
from worker.store.warmup import hold_wave

logger = logging.getLogger(__name__)

#: Session states in which a session still holds its wave open.
ACTIVE = tuple(s.value for s in SessionStatus if s not in TERMINAL)
#: Outbox kind that starts the next wave of a run.
START_WAVE = "start_wave"


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


@dataclass(frozen=True)
class SessionEnd:
    """A session that has just ended (:func:`end_session`)."""

    wave_closed: bool
    """It was the last of its wave: the wave's successor (the next wave, or the next run
    of a ladder) may be in the outbox now."""


@dataclass(frozen=True)
class Dispatch:
    """A task the database says must be sent: a turn, or a verification."""

    session_id: int
    kind: str
    number: int
    delay_s: float = 0.0
    """Send it this many seconds from now (a first turn held back to warm the cache)."""
    verifier: str = "chromium"
    """For a verification: the kind of verifier its run's task needs (it picks the queue)."""


#: What a due session's dispatch is made of: its state, its numbers and its run's verifier.
_DUE = (
    sessions.c.id,
    sessions.c.status,
    sessions.c.next_turn,
    sessions.c.repair_round,
    select(runs.c.verifier)
    .where(runs.c.id == sessions.c.run_id)
    .correlate_except(runs)
    .scalar_subquery()
    .label("verifier"),
)


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
            sessions.c.lease_expires_at.is_(None)
            | (sessions.c.lease_expires_at < bindparam("b_now")),
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


def claim_turn(
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
    run_status = conn.execute(select(runs.c.status).where(runs.c.id == run_id)).scalar_one()
    if has_next is not None and run_status == RunStatus.running.value:
        conn.execute(insert(outbox).values(wave_start(run_id, wave.wave_index + 1, now)))
    elif run_status == RunStatus.running.value:
        conn.execute(
            update(runs)
            .where(runs.c.id == run_id)
            .values(status=RunStatus.finished.value, finished_at=now)
        )
        _next_in_ladder(conn, run_id=run_id, now=now)
    elif run_status == RunStatus.cancelled.value and not _any_active(conn, run_id):
        conn.execute(update(runs).where(runs.c.id == run_id).values(finished_at=now))
    return True


def wave_start(run_id: int, index: int, now: datetime) -> dict[str, Any]:
    """The outbox row that starts wave ``index`` of a run (its key makes it unique)."""
    return {
        "key": f"run:{run_id}:wave:{index}",
        "run_id": run_id,
        "kind": START_WAVE,
        "payload": {"index": index},
        "created_at": now,
    }


def _next_in_ladder(conn: Connection, *, run_id: int, now: datetime) -> None:
    # A ladder's runs go one after the other: the finished run starts the next pending one,
    # or closes the ladder when it was the last.
    ladder_id = conn.execute(select(runs.c.ladder_id).where(runs.c.id == run_id)).scalar()
    if ladder_id is None:
        return
    nxt = conn.execute(
        select(runs.c.id)
        .where(
            runs.c.ladder_id == ladder_id,
            runs.c.status == RunStatus.pending.value,
            runs.c.id > run_id,
        )
        .order_by(runs.c.id)
        .limit(1)
    ).scalar()
    if nxt is not None:
        conn.execute(insert(outbox).values(wave_start(nxt, 1, now)))
        notify_run(conn, nxt)
    else:
        conn.execute(
            update(ladders)
            .where(ladders.c.id == ladder_id)
            .values(status=RunStatus.finished.value, finished_at=now)
        )


def _any_active(conn: Connection, run_id: int) -> bool:
    return (
        conn.execute(
            select(sessions.c.id)
            .where(sessions.c.run_id == run_id, sessions.c.status.in_(ACTIVE))
            .limit(1)
        ).first()
        is not None
    )


def start_wave(conn: Connection, *, run_id: int, index: int, now: datetime) -> list[Dispatch]:
    """Start wave ``index`` of a run once; returns the first turns to dispatch.

    With a budget, a wave after the first starts only if the run's forecast says its
    sessions can be paid; otherwise the run stops there (:func:`stop_by_forecast`).
    """
    if index > 1 and stop_by_forecast(conn, run_id=run_id, now=now):
        return []
    wave = conn.execute(
        update(waves)
        .where(
            waves.c.run_id == run_id,
            waves.c.index == index,
            waves.c.status == WaveStatus.pending.value,
        )
        .values(status=WaveStatus.running.value, started_at=now)
        .returning(waves.c.id)
    ).first()
    if wave is None:
        return []
    conn.execute(
        update(runs)
        .where(runs.c.id == run_id, runs.c.status == RunStatus.pending.value)
        .values(status=RunStatus.running.value, started_at=now)
    )
    started = conn.execute(
        update(sessions)
        .where(sessions.c.wave_id == wave.id, sessions.c.status == SessionStatus.pending.value)
        .values(status=SessionStatus.running.value, started_at=now, dispatched_at=now)
        .returning(sessions.c.id, sessions.c.next_turn)
    ).all()
    notify_run(conn, run_id)
    started = sorted(started)
    delay_s = hold_wave(conn, run_id=run_id, session_ids=[r.id for r in started], now=now)
    return [
        Dispatch(r.id, "turn", r.next_turn, delay_s if i else 0.0) for i, r in enumerate(started)
    ]


def stop_by_forecast(conn: Connection, *, run_id: int, now: datetime) -> bool:
    """Stop a running run whose budget forecast's upper bound passes its budget.

    Its sessions that have not started end ``stopped`` (outcome ``forecast``), their waves
    close, and the run ends ``stopped`` with the forecast as its reason. Returns True when
    it stopped the run.
    """
    run = conn.execute(
        select(runs.c.status, runs.c.budget_usd, runs.c.config)
        .where(runs.c.id == run_id)
        .with_for_update()
    ).one()
    if (
        run.budget_usd is None
        or run.status != RunStatus.running.value
        or run.config.get("forecast", "on") != "on"
    ):
        return False
    projected = forecast(conn, run_id=run_id)
    if projected is None or not projected.over_budget:
        return False
    reason = f"forecast: {projected.describe()}"
    conn.execute(
        update(sessions)
        .where(sessions.c.run_id == run_id, sessions.c.status == SessionStatus.pending.value)
        .values(
            status=Outcome.forecast.status.value,
            outcome=Outcome.forecast.value,
            error=reason,
            finished_at=now,
        )
    )
    conn.execute(
        update(waves)
        .where(waves.c.run_id == run_id, waves.c.status == WaveStatus.pending.value)
        .values(status=WaveStatus.finished.value, done_count=waves.c.size, finished_at=now)
    )
    conn.execute(
        update(runs)
        .where(runs.c.id == run_id)
        .values(status=RunStatus.stopped.value, stop_reason=reason, finished_at=now)
    )
    logger.warning("run %s stopped before its next wave: %s", run_id, reason)
    _next_in_ladder(conn, run_id=run_id, now=now)
    notify_run(conn, run_id)
    return True


def take_outbox(
    conn: Connection,
    *,
    now: datetime,
    older_than: datetime | None = None,
    run_id: int | None = None,
) -> list[Dispatch]:
    """Process undispatched outbox rows: mark each dispatched and start its wave."""
    query = select(outbox.c.id, outbox.c.run_id, outbox.c.kind, outbox.c.payload).where(
        outbox.c.dispatched_at.is_(None)
    )
    if older_than is not None:
        query = query.where(outbox.c.created_at < older_than)
    if run_id is not None:
        query = query.where(outbox.c.run_id == run_id)
    dispatches: list[Dispatch] = []
    for row in conn.execute(query.order_by(outbox.c.id)).all():
        taken = conn.execute(
            update(outbox)
            .where(outbox.c.id == row.id, outbox.c.dispatched_at.is_(None))
            .values(dispatched_at=now)
        )
        if taken.rowcount != 1:
            continue
        if row.kind == START_WAVE:
            dispatches += start_wave(conn, run_id=row.run_id, index=row.payload["index"], now=now)
    return dispatches


def cancel_run(conn: Connection, *, run_id: int, reason: str) -> None:
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


def cancel_ladder(conn: Connection, *, ladder_id: int) -> None:
    """Mark a ladder cancelled: none of its pending runs will start."""
    conn.execute(
        update(ladders).where(ladders.c.id == ladder_id).values(status=RunStatus.cancelled.value)
    )


def reopen_run(conn: Connection, *, run_id: int, now: datetime) -> list[Dispatch]:
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
        .returning(*_DUE)
    ).all()
    return [_dispatch_of(row) for row in sorted(rows)]


def lease_owners(conn: Connection, *, now: datetime) -> list[str]:
    """The owners of the live leases of active sessions."""
    rows = conn.execute(
        select(sessions.c.lease_owner)
        .where(
            sessions.c.status.in_(ACTIVE),
            sessions.c.lease_owner.is_not(None),
            sessions.c.lease_expires_at >= now,
        )
        .distinct()
    ).scalars()
    return [str(owner) for owner in rows]


def claim_lapsed(
    conn: Connection, *, now: datetime, dead_owners: Sequence[str] = ()
) -> list[Dispatch]:
    """Claim the active sessions whose lease lapsed, or whose owner is in ``dead_owners``.

    Such a session lost its worker: it is taken over at once. Claiming by UPDATE ...
    RETURNING means two reconcilers never send the same row; the lease is cleared, so it
    is sent once.
    """
    s = sessions
    rows = conn.execute(
        update(s)
        .where(
            s.c.status.in_([SessionStatus.running.value, SessionStatus.verifying.value]),
            s.c.lease_expires_at.is_not(None),
            (s.c.lease_expires_at < now) | s.c.lease_owner.in_(list(dead_owners)),
        )
        .values(dispatched_at=now, lease_owner=None, lease_expires_at=None)
        .returning(*_DUE)
    ).all()
    return [_dispatch_of(row) for row in sorted(rows)]


@dataclass(frozen=True)
class Unclaimed:
    """A due session no worker holds, whose last dispatch is older than the caller asked."""

    dispatch: Dispatch
    dispatched_at: datetime | None

    @property
    def task_id(self) -> str:
        """The id its task is sent with (``turn:<session>:<turn>``)."""
        d = self.dispatch
        return f"{d.kind}:{d.session_id}:{d.number}"


def unclaimed(conn: Connection, *, before: datetime) -> list[Unclaimed]:
    """The running or verifying sessions without a lease, last dispatched before ``before``.

    Each is either waiting for a worker (its message queued) or lost its message; the
    reconciler tells which apart before :func:`redispatch`.
    """
    s = sessions
    rows = conn.execute(
        select(*_DUE, s.c.dispatched_at).where(
            s.c.status.in_([SessionStatus.running.value, SessionStatus.verifying.value]),
            s.c.lease_expires_at.is_(None),
            s.c.dispatched_at.is_(None) | (s.c.dispatched_at < before),
        )
    ).all()
    return [Unclaimed(_dispatch_of(row), row.dispatched_at) for row in sorted(rows)]


def redispatch(conn: Connection, *, items: Sequence[Unclaimed], now: datetime) -> list[Dispatch]:
    """Claim ``items`` to send again, those still as :func:`unclaimed` saw them.

    One that a worker claimed since, that moved on a turn, or that another reconciler
    claimed first is left out, so each is sent once.
    """
    if not items:
        return []
    s = sessions
    number = case(
        (s.c.status == SessionStatus.verifying.value, s.c.repair_round), else_=s.c.next_turn
    )
    # Each as it was seen: a session claimed, moved on, handed back for a retry or sent
    # by another reconciler since has another lease, number or dispatch time.
    seen = [(u.dispatch.session_id, u.dispatch.number, u.dispatched_at) for u in items]
    dated = [t for t in seen if t[2] is not None]
    undated = [t[:2] for t in seen if t[2] is None]
    as_seen: list[ColumnElement[bool]] = []
    if dated:
        as_seen.append(tuple_(s.c.id, number, s.c.dispatched_at).in_(dated))
    if undated:
        as_seen.append(tuple_(s.c.id, number).in_(undated) & s.c.dispatched_at.is_(None))
    rows = conn.execute(
        update(s)
        .where(
            or_(*as_seen),
            s.c.status.in_([SessionStatus.running.value, SessionStatus.verifying.value]),
            s.c.lease_expires_at.is_(None),
        )
        .values(dispatched_at=now)
        .returning(*_DUE)
    ).all()
    return [_dispatch_of(row) for row in sorted(rows)]


def _dispatch_of(row: Any) -> Dispatch:
    if row.status == SessionStatus.verifying.value:
        return Dispatch(row.id, "verify", row.repair_round, verifier=row.verifier)
    return Dispatch(row.id, "turn", row.next_turn)
