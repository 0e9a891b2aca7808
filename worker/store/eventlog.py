"""A session's event log read from a mark on: only what is new since the turn before.

Events are only ever appended, in ``(turn_no, seq)`` order (by the lease's holder, or by a
verdict while no turn runs), so a worker that read a session's log up to some event reads
only the events after it next time. It first checks that the event it stopped at is still
there, the same row (:class:`LogMark`): a session whose log was rewritten (a fork rebuilt,
a database truncated and refilled, the mark's row updated) reads its whole log again. An
earlier row changed in place would go unseen; nothing in Swarm updates an event. PostgreSQL
only: elsewhere a turn reads the whole log (:func:`worker.store.sessions.load_session`).

An event's long strings are stored apart, once (:mod:`worker.store.blobs`): the read brings
each new event's stored texts with it, in the same statement, and gives back its payload
whole. A history kept from turn to turn never reads a text twice.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, NamedTuple

from sqlalchemy import (
    JSON,
    Integer,
    String,
    Text,
    bindparam,
    cast,
    column,
    exists,
    func,
    literal_column,
    select,
    tuple_,
)
from sqlalchemy.dialects.postgresql import aggregate_order_by
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.selectable import Exists, ScalarSelect

from worker.store.blobs import Blob, blob_params, restore, set_apart, unpack_sent
from worker.store.tables import blobs, events

__all__ = [
    "EVENT_ROWS",
    "LogMark",
    "LogRows",
    "log_after",
    "mark_holds",
    "mark_params",
    "read_log",
    "rows_of",
    "stored_rows",
]

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


_REF = func.json_array_elements(events.c.blobs).table_valued("value").alias("ref")
#: The texts an event's payload keeps apart, as one JSON object by key (or NULL).
_TEXTS = (
    select(func.json_object_agg(blobs.c.sha256, func.encode(blobs.c.content, "base64")))
    .where(blobs.c.sha256.in_(select(_REF.c.value.op("->>")(1))))
    .correlate(events)
    .scalar_subquery()
)


def log_after(session_id: ColumnElement[Any]) -> ScalarSelect[Any]:
    """The session's events after the mark, in log order, as one JSON array (or NULL).

    Each element is ``[kind, payload, turn_no, seq, id, xmin, blobs, texts]``: the payload as
    stored, where its strings set apart go, and their texts.
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
                        events.c.blobs,
                        _TEXTS,
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
    for row in reversed(log):
        turn_no, event_seq = row[2], row[3]
        if turn_no == next_turn:
            seq = max(seq, event_seq)
            break
        if turn_no < next_turn:
            break
    tail = LogMark(*log[-1][2:6]) if log else after
    read = [(row[0], restore(row[1], row[6], _unpacked(row[7]))) for row in log]
    return LogRows(read, tail, seq + 1)


#: A commit's events as one JSON parameter (``e_rows``, :func:`stored_rows`).
EVENT_ROWS = (
    func.json_to_recordset(bindparam("e_rows", type_=JSON))
    .table_valued(
        column("seq", Integer),
        column("kind", String),
        column("payload", JSON),
        column("blobs", JSON),
    )
    .render_derived(name="turn_events", with_types=True)
)


def _unpacked(texts: dict[str, str] | None) -> dict[str, str]:
    return {sha: unpack_sent(data) for sha, data in (texts or {}).items()}


def stored_rows(
    items: Sequence[tuple[str, dict[str, Any]]], *, first_seq: int, known: Collection[str] = ()
) -> dict[str, Any]:
    """The bound values of a commit's events: ``e_rows`` (:data:`EVENT_ROWS`), and
    ``x_blobs``, the texts they set apart (:func:`worker.store.blobs.added_cte`).

    Args:
        items: ``(kind, payload)`` of each event, in order, the payloads whole.
        first_seq: The sequence number of the first.
        known: Texts the transaction stored or read already, not sent again
            (:func:`worker.store.blobs.stored_here`).
    """
    rows = []
    stored: list[Blob] = []
    for i, (kind, payload) in enumerate(items):
        apart = set_apart(kind, payload)
        stored += apart.blobs
        rows.append(
            {"seq": first_seq + i, "kind": kind, "payload": apart.payload, "blobs": apart.refs}
        )
    return {"e_rows": rows, "x_blobs": blob_params(stored, known=known)}
