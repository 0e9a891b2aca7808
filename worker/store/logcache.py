"""A session's event log as a worker process reads it, each payload decoded once.

A turn reads the whole log of its session, and every model output in it may carry a page:
decoding them all again each turn made a turn's CPU grow by about 90 us a turn. A process
keeps the payloads it read, by database, session and row version (``id`` and PostgreSQL's
``xmin``, which a new row or an UPDATE changes, so a rewritten or recreated row is never
mistaken for the one kept): the next read of that session fetches only the rows it has
not seen. Payloads handed out are shared between reads and must not be changed. Other
backends read the whole log every time.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, NamedTuple

from sqlalchemy import BigInteger, Text, any_, bindparam, case, cast, literal_column, null, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.engine import Connection

from worker.store.tables import events

#: Sessions whose payloads a process keeps, the least recently read dropped first: more
#: than a worker runs at once (``-P threads -c 100``), or a round of turns evicts every one.
MAX_SESSIONS = 256


class LogRow(NamedTuple):
    """One event of a session's log."""

    kind: str
    payload: dict[str, Any]
    turn_no: int
    seq: int


_ORDER = (events.c.turn_no, events.c.seq)
_PLAIN = (
    select(events.c.kind, events.c.payload, events.c.turn_no, events.c.seq)
    .where(events.c.session_id == bindparam("session_id"))
    .order_by(*_ORDER)
)
_XMIN = cast(literal_column("events.xmin"), Text).label("xmin")
_KNOWN = bindparam("known", type_=ARRAY(BigInteger))
#: Every row's version; the payload only of rows not in ``known``.
_ROWS = (
    select(
        events.c.id,
        _XMIN,
        events.c.kind,
        events.c.turn_no,
        events.c.seq,
        case((events.c.id == any_(_KNOWN), null()), else_=events.c.payload).label("payload"),
    )
    .where(events.c.session_id == bindparam("session_id"))
    .order_by(*_ORDER)
)
_PAYLOADS = select(events.c.id, _XMIN, events.c.payload).where(
    events.c.id == any_(bindparam("ids", type_=ARRAY(BigInteger)))
)

_Kept = dict[int, tuple[str, dict[str, Any]]]
"""Row id -> (xmin, payload)."""
_kept: OrderedDict[tuple[str, int], _Kept] = OrderedDict()
_lock = threading.Lock()


def read_log(conn: Connection, *, session_id: int) -> list[LogRow]:
    """The session's events in log order."""
    if conn.dialect.name != "postgresql":
        rows = conn.execute(_PLAIN, {"session_id": session_id}).all()
        return [LogRow(r.kind, r.payload, r.turn_no, r.seq) for r in rows]
    key = (conn.engine.url.render_as_string(), session_id)
    with _lock:
        known = _kept.pop(key, {})
    rows = conn.execute(_ROWS, {"session_id": session_id, "known": list(known)}).all()
    # A kept row whose version moved on (rewritten, or the database was recreated).
    stale = [r.id for r in rows if r.payload is None and known.get(r.id, ("",))[0] != r.xmin]
    if stale:
        for r in conn.execute(_PAYLOADS, {"ids": stale}):
            known[r.id] = (r.xmin, r.payload)
    kept: _Kept = {}
    log = []
    for r in rows:
        entry = (r.xmin, r.payload) if r.payload is not None else known[r.id]
        kept[r.id] = entry
        log.append(LogRow(r.kind, entry[1], r.turn_no, r.seq))
    with _lock:
        _kept[key] = kept
        while len(_kept) > MAX_SESSIONS:
            _kept.popitem(last=False)
    return log
