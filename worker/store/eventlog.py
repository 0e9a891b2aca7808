"""A session's event log read from a mark on: only what is new since the turn before.

Events are only ever appended, in ``(turn_no, seq)`` order (by the lease's holder, or by a
verdict while no turn runs), so a worker that read a session's log up to some event reads
only the events after it next time. It first checks that the event it stopped at is still
there, the same row (:class:`LogMark`): a session whose log was rewritten (a fork rebuilt,
a database truncated and refilled, the mark's row updated) reads its whole log again. An
earlier row changed in place would go unseen; nothing in Swarm updates an event. PostgreSQL
only: elsewhere a turn reads the whole log (:func:`worker.store.sessions.load_session`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from sqlalchemy import JSON, Text, bindparam, cast, exists, func, literal_column, select, tuple_
from sqlalchemy.dialects.postgresql import aggregate_order_by
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.selectable import Exists, ScalarSelect

from worker.store.tables import events

__all__ = ["LogMark", "LogRows", "log_after", "mark_holds", "mark_params", "read_log", "rows_of"]

#: The PostgreSQL transaction that wrote an event row, as text. A table truncated and filled
#: again reuses ids (``RESTART IDENTITY``) and keys; it never reuses this.
_XMIN = cast(literal_column("events.xmin"), Text)
#: Where a read without a mark starts: before any event.
_START = (-1, -1)


class LogMark(NamedTuple):
    """One event of a session's log, as a later read checks it is still the same row."""

    turn_no: int
    seq: int
    event_id: int
    xmin: str
    """The transaction that wrote it (PostgreSQL's ``xmin``)."""


def mark_params(mark: LogMark | None) -> dict[str, Any]:
    """The bound parameters of :func:`log_after` and :func:`mark_holds` for ``mark``."""
    if mark is None:
        return {"m_turn_no": _START[0], "m_seq": _START[1], "m_event_id": -1, "m_xmin": ""}
    return {
        "m_turn_no": mark.turn_no,
        "m_seq": mark.seq,
        "m_event_id": mark.event_id,
        "m_xmin": mark.xmin,
    }


def log_after(session_id: ColumnElement[Any]) -> ScalarSelect[Any]:
    """The session's events after the mark, in log order, as one JSON array (or NULL).

    Each element is ``[kind, payload, turn_no, seq, id, xmin]``.
    """
    key = tuple_(events.c.turn_no, events.c.seq)
    return (
        select(
            func.json_agg(
                aggregate_order_by(
                    func.json_build_array(
                        events.c.kind,
                        events.c.payload,
                        events.c.turn_no,
                        events.c.seq,
                        events.c.id,
                        _XMIN,
                    ),
                    events.c.turn_no,
                    events.c.seq,
                ),
                type_=JSON,
            )
        )
        .where(
            events.c.session_id == session_id,
            key > tuple_(bindparam("m_turn_no"), bindparam("m_seq")),
        )
        .scalar_subquery()
    )


def mark_holds(session_id: ColumnElement[Any]) -> Exists:
    """True when the mark's event is still the row it was."""
    return exists().where(
        events.c.session_id == session_id,
        events.c.turn_no == bindparam("m_turn_no"),
        events.c.seq == bindparam("m_seq"),
        events.c.id == bindparam("m_event_id"),
        bindparam("m_xmin") == _XMIN,
    )


_WHOLE_LOG = select(log_after(bindparam("session_id")))


def read_log(conn: Connection, *, session_id: int) -> list[list[Any]]:
    """The session's whole log, as :func:`log_after` gives it (PostgreSQL)."""
    rows = conn.execute(_WHOLE_LOG, {"session_id": session_id, **mark_params(None)}).scalar()
    return list(rows or [])


class LogRows(NamedTuple):
    """What a read of the log gives a turn."""

    events: list[tuple[str, dict[str, Any]]]
    """``(kind, payload)`` of each event read, in log order."""
    tail: LogMark | None
    """The log's last event: where the next read starts."""
    next_seq: int
    """The next free sequence number of the current turn."""


def rows_of(log: Sequence[Sequence[Any]], *, after: LogMark | None, next_turn: int) -> LogRows:
    """The events of ``log`` (read after ``after``) and where the log now ends.

    Args:
        log: Rows as :func:`log_after` gives them.
        after: The mark they were read after; None for the whole log.
        next_turn: The session's current turn.
    """
    # The rows after the mark come in log order: the current turn's last event is the
    # last read, or the mark itself.
    seq = after.seq if after is not None and after.turn_no == next_turn else -1
    for _, _, turn_no, event_seq, _, _ in reversed(log):
        if turn_no == next_turn:
            seq = max(seq, event_seq)
            break
        if turn_no < next_turn:
            break
    tail = LogMark(*log[-1][2:6]) if log else after
    return LogRows([(row[0], row[1]) for row in log], tail, seq + 1)
