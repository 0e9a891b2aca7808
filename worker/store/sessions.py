"""A session as the turn loop reads it, and what a turn appends: events and usage.

Every function takes an open :class:`~sqlalchemy.engine.Connection` inside the caller's
transaction. State transitions live in :mod:`worker.store.endings`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any, Protocol

from sqlalchemy import bindparam, func, insert, select
from sqlalchemy.engine import Connection

from worker.store import blobs
from worker.store.eventlog import LogMark
from worker.store.tables import events, runs, sessions, turn_timings, usage


class LogEntry(Protocol):
    """An event as the log stores it (``worker.agent.events`` defines them)."""

    @property
    def kind(self) -> Enum:
        """The event's kind; its value is stored."""
        ...

    def to_payload(self) -> dict[str, Any]:
        """The event's JSON payload."""
        ...


#: What a session reads of its run's task.
RUN_TASK_COLUMNS = (runs.c.task_ref, runs.c.task_version, runs.c.task_sha256)

# A turn runs these statements every time: built once, their SQL is compiled once (building
# and keying a statement costs more CPU than PostgreSQL spends on a primary-key lookup).
_SESSION = (
    select(
        sessions.c.id,
        sessions.c.run_id,
        sessions.c.index.label("session_index"),
        sessions.c.persona,
        sessions.c.instance_id,
        sessions.c.brief,
        sessions.c.status,
        sessions.c.next_turn,
        sessions.c.repair_round,
        runs.c.model,
        runs.c.profile,
        runs.c.config,
        runs.c.status.label("run_status"),
        runs.c.budget_usd,
        *RUN_TASK_COLUMNS,
    )
    .join(runs, runs.c.id == sessions.c.run_id)
    .where(sessions.c.id == bindparam("session_id"))
)
_LOG = (
    select(events.c.kind, events.c.payload, events.c.blobs, events.c.turn_no, events.c.seq)
    .where(events.c.session_id == bindparam("session_id"))
    .order_by(events.c.turn_no, events.c.seq)
)
_ADD_EVENTS = insert(events)
_ADD_USAGE = insert(usage)
_ADD_TIMING = insert(turn_timings)


def next_seq(conn: Connection, *, session_id: int, turn_no: int) -> int:
    """The next free event sequence number within one turn."""
    last = conn.execute(
        select(func.max(events.c.seq)).where(
            events.c.session_id == session_id, events.c.turn_no == turn_no
        )
    ).scalar()
    return 0 if last is None else int(last) + 1


def add_events(
    conn: Connection,
    *,
    session_id: int,
    turn_no: int,
    items: Sequence[LogEntry],
    now: datetime,
    first_seq: int | None = None,
) -> None:
    """Append events to a turn, after any already there (from ``first_seq`` when the
    caller knows it, which saves a query); their long strings are stored once
    (:mod:`worker.store.blobs`)."""
    if not items:
        return
    seq = next_seq(conn, session_id=session_id, turn_no=turn_no) if first_seq is None else first_seq
    add_logged(
        conn,
        [
            {
                "session_id": session_id,
                "turn_no": turn_no,
                "seq": seq + i,
                "kind": item.kind.value,
                "payload": item.to_payload(),
                "created_at": now,
            }
            for i, item in enumerate(items)
        ],
    )


def add_logged(conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
    """Insert event rows (their columns, the payload whole), their long strings stored once."""
    stored: list[blobs.Blob] = []
    kept = []
    for row in rows:
        apart = blobs.set_apart(row["kind"], row["payload"])
        stored += apart.blobs
        kept.append({**row, "payload": apart.payload, "blobs": apart.refs})
    blobs.add_blobs(conn, stored)
    conn.execute(_ADD_EVENTS, kept)


@dataclass(frozen=True)
class SessionView:
    """A session as a turn needs it: its run's settings and its event log (or the part of
    it after ``log_after``)."""

    id: int
    run_id: int
    index: int
    persona: str
    instance_id: str
    brief: dict[str, Any]
    """The instance's public fields."""
    status: str
    next_turn: int
    repair_round: int
    model: str
    profile: str
    run_config: dict[str, Any]
    run_status: str
    run_budget_usd: float | None
    events: list[tuple[str, dict[str, Any]]]
    task_ref: str
    """How the run loads its task."""
    task_version: str
    task_sha256: str | None
    next_seq: int = 0
    """The next free event sequence number of turn ``next_turn``."""
    log_after: LogMark | None = None
    """The event ``events`` start after (what the reader had read before); None: ``events``
    is the whole log."""
    # Where a read ended is the reader's bookkeeping, not the session's state.
    log_tail: LogMark | None = field(default=None, compare=False)
    """The log's last event, where a later read may start (PostgreSQL only)."""


def load_session(conn: Connection, *, session_id: int) -> SessionView:
    """Load a session, its run's settings and its events in log order."""
    row = conn.execute(_SESSION, {"session_id": session_id}).one()
    log = conn.execute(_LOG, {"session_id": session_id}).all()
    payloads = blobs.restore_all(conn, [(e.payload, e.blobs) for e in log])
    current = [e.seq for e in log if e.turn_no == row.next_turn]
    return SessionView(
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
        events=[(e.kind, p) for e, p in zip(log, payloads, strict=True)],
        task_ref=row.task_ref,
        task_version=row.task_version,
        task_sha256=row.task_sha256,
        next_seq=max(current) + 1 if current else 0,
    )


def add_usage(
    conn: Connection,
    *,
    session_id: int,
    run_id: int,
    turn_no: int,
    values: dict[str, Any],
    now: datetime,
) -> None:
    """Record the usage row of one committed turn."""
    conn.execute(
        _ADD_USAGE,
        {"session_id": session_id, "run_id": run_id, "turn_no": turn_no, "created_at": now}
        | values,
    )


def add_timing(
    conn: Connection, *, session_id: int, run_id: int, turn_no: int, values: dict[str, Any]
) -> None:
    """Record the timing ledger row of one committed turn (``TurnTimer.row``)."""
    conn.execute(
        _ADD_TIMING, {"session_id": session_id, "run_id": run_id, "turn_no": turn_no} | values
    )
