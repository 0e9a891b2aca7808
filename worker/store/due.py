"""What is due: a task the database decided on, and the due sessions no worker holds.

A :class:`Dispatch` is what must be sent (a turn, or a verification on its verifier's
queue). The reconciler finds what was lost (:func:`unclaimed`, then :func:`redispatch`) and
what lost its worker (:func:`claim_lapsed`), each claimed by UPDATE ... RETURNING so that two
reconcilers never send the same row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import case, or_, select, tuple_, update
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from worker.states import TERMINAL, SessionStatus
from worker.store import claims
from worker.store.tables import runs, sessions

__all__ = [
    "ACTIVE",
    "DUE_COLUMNS",
    "Dispatch",
    "Unclaimed",
    "claim_lapsed",
    "dispatch_of",
    "lease_owners",
    "redispatch",
    "unclaimed",
    "unsent",
]


#: Session states in which a session still holds its wave open.
ACTIVE = tuple(s.value for s in SessionStatus if s not in TERMINAL)


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
    takeover: bool = False
    """Sent again for a session that lost its worker or its message: it goes ahead of the
    tasks queued, as the work in flight it was (a verification waits seconds, not the
    length of a busy browser queue)."""

    @property
    def task_id(self) -> str:
        """The id its task is sent with (``turn:<session>:<turn>``), the same every time:
        the broker's messages are told apart by it."""
        return f"{self.kind}:{self.session_id}:{self.number}"


#: What a due session's dispatch is made of: its state, its numbers and its run's verifier.
DUE_COLUMNS = (
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


def lease_owners(conn: Connection, *, now: datetime) -> list[str]:
    """The owners of the live leases of active sessions."""
    rows = conn.execute(
        select(sessions.c.lease_owner)
        .where(
            sessions.c.status.in_(ACTIVE),
            sessions.c.lease_owner.is_not(None),
            ~claims.lease_free(now),
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
            claims.lease_lapsed(now) | s.c.lease_owner.in_(list(dead_owners)),
        )
        .values(dispatched_at=now, lease_owner=None, lease_expires_at=None)
        .returning(*DUE_COLUMNS)
    ).all()
    return [dispatch_of(row, takeover=True) for row in sorted(rows)]


@dataclass(frozen=True)
class Unclaimed:
    """A due session no worker holds, whose last dispatch is older than the caller asked."""

    dispatch: Dispatch
    dispatched_at: datetime | None

    @property
    def task_id(self) -> str:
        """The id its task is sent with (``turn:<session>:<turn>``)."""
        return self.dispatch.task_id


def unclaimed(conn: Connection, *, before: datetime) -> list[Unclaimed]:
    """The running or verifying sessions without a lease, last dispatched before ``before``.

    Each is either waiting for a worker (its message queued) or lost its message; the
    reconciler tells which apart before :func:`redispatch`.
    """
    s = sessions
    rows = conn.execute(
        select(*DUE_COLUMNS, s.c.dispatched_at).where(
            s.c.status.in_([SessionStatus.running.value, SessionStatus.verifying.value]),
            s.c.lease_expires_at.is_(None),
            s.c.dispatched_at.is_(None) | (s.c.dispatched_at < before),
        )
    ).all()
    return [Unclaimed(dispatch_of(row), row.dispatched_at) for row in sorted(rows)]


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
        .returning(*DUE_COLUMNS)
    ).all()
    return [dispatch_of(row, takeover=True) for row in sorted(rows)]


def unsent(conn: Connection, *, items: Sequence[Dispatch]) -> None:
    """Record that ``items`` could not be sent (the broker was out of reach).

    Their sessions are due as if never dispatched, so that the reconciler of any worker
    that reaches the broker sends them after two passes, instead of waiting as it does for
    a message the broker may still hold. A session claimed since is left as it is.
    """
    if not items:
        return
    s = sessions
    number = case(
        (s.c.status == SessionStatus.verifying.value, s.c.repair_round), else_=s.c.next_turn
    )
    conn.execute(
        update(s)
        .where(
            tuple_(s.c.id, number).in_([(d.session_id, d.number) for d in items]),
            s.c.lease_expires_at.is_(None),
        )
        .values(dispatched_at=None)
    )


def dispatch_of(row: Any, *, takeover: bool = False) -> Dispatch:
    if row.status == SessionStatus.verifying.value:
        return Dispatch(
            row.id, "verify", row.repair_round, verifier=row.verifier, takeover=takeover
        )
    return Dispatch(row.id, "turn", row.next_turn, takeover=takeover)
