"""Text stored once, addressed by the SHA-256 of its UTF-8 bytes (the ``blobs`` table).

A page the model writes reaches the store three ways: in its call's arguments (the model
output event), as the artifact, and as the artifact's version row. Each of them keeps the
page's SHA-256; the page itself is one row of ``blobs``, shared by all three and by every
session that wrote the same bytes. Rows are added with ``ON CONFLICT DO NOTHING`` in the
statement (or, on SQLite, the transaction) that writes their first reference, and never
change, so a reference always finds its text. The worker that writes a text compresses it
(:class:`~worker.store.tables.PackedText`), once: a text the transaction has stored or read
already is not sent again (:func:`note_stored`).

In the event log, :func:`set_apart` replaces each long string of a payload by a marker
(``{"$blob": sha256}``) and lists where they were in the event's ``blobs`` column
(``[[path, sha256], ...]``); :func:`restore` puts them back. The column, not the marker,
says what to restore: a payload the model wrote that looks like a marker stays as it is.
Only the kinds that can carry a page are set apart (the model's calls and the tools'
results, written by the session's own worker): the verify worker's role writes feedback
events and may not add blobs.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from sqlalchemy import JSON, Integer, String, Text, bindparam, column, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.selectable import CTE

from worker.store.tables import blobs, pack, unpack

__all__ = [
    "BLOB_MIN_CHARS",
    "SET_APART_KINDS",
    "Apart",
    "Blob",
    "add_blobs",
    "added_cte",
    "blob_of",
    "blob_params",
    "contents",
    "note_stored",
    "restore",
    "restore_all",
    "set_apart",
    "sha256_of",
    "shas_of",
    "stored_here",
    "unpack_sent",
]

#: Strings of an event's payload this long or longer are kept in ``blobs``: a marker and
#: its reference cost about 150 bytes, a row of its own about 100 more.
BLOB_MIN_CHARS = 1024
#: Event kinds whose payload may carry a page: the model's calls and the tools' results.
SET_APART_KINDS = frozenset({"model", "tool_result"})
#: The key of the marker left where a string was set apart.
MARKER = "$blob"


def sha256_of(text: str) -> str:
    """The hex SHA-256 of ``text``'s UTF-8 bytes: its key in ``blobs``."""
    return hashlib.sha256(text.encode()).hexdigest()


class Blob(NamedTuple):
    """One row of ``blobs``."""

    sha256: str
    content: str
    size_bytes: int


def blob_of(text: str) -> Blob:
    """The row that stores ``text``."""
    data = text.encode()
    return Blob(hashlib.sha256(data).hexdigest(), text, len(data))


#: Where a connection keeps the keys its current transaction stored or read.
_KNOWN = "swarm.blobs_known"


def note_stored(conn: Connection, shas: Iterable[str]) -> None:
    """Remember that the texts of ``shas`` are in ``blobs`` as the current transaction sees
    them (it stored or read them): a later write of this transaction need not send them."""
    # Kept on the transaction, innermost first: a savepoint rolled back takes what it
    # stored with it, and what it noted no longer matches the transaction that asks.
    txn = conn.get_nested_transaction() or conn.get_transaction()
    if txn is None:
        return
    held: tuple[object, set[str]] | None = conn.info.get(_KNOWN)
    if held is None or held[0] is not txn:
        held = (txn, set())
        conn.info[_KNOWN] = held
    held[1].update(shas)


def stored_here(conn: Connection) -> frozenset[str]:
    """The keys :func:`note_stored` noted in the current transaction."""
    held = conn.info.get(_KNOWN)
    txn = conn.get_nested_transaction() or conn.get_transaction()
    if held is None or txn is None or held[0] is not txn:
        return frozenset()
    return frozenset(held[1])


def add_blobs(conn: Connection, items: Iterable[Blob]) -> None:
    """Store the texts not stored yet, in the caller's transaction (one statement)."""
    known = stored_here(conn)
    kept = _unique(b for b in items if b.sha256 not in known)
    if not kept:
        return
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    conn.execute(dialect.insert(blobs).on_conflict_do_nothing(), [b._asdict() for b in kept])
    note_stored(conn, (b.sha256 for b in kept))


def _unique(items: Iterable[Blob]) -> list[Blob]:
    # In key order: two transactions adding the same texts take their locks in one order.
    kept = {b.sha256: b for b in items}
    return [kept[k] for k in sorted(kept)]


def blob_params(items: Iterable[Blob], *, known: Collection[str] = ()) -> list[dict[str, Any]]:
    """The bound value of :func:`added_cte`'s parameter for ``items``, but those ``known``
    to be stored already (:func:`stored_here`)."""
    return [
        {
            "sha256": b.sha256,
            "content": base64.b64encode(pack(b.content)).decode(),
            "size_bytes": b.size_bytes,
        }
        for b in _unique(items)
        if b.sha256 not in known
    ]


def unpack_sent(data: str) -> str:
    """A text as a statement sent it in JSON (``encode(content, 'base64')``)."""
    return unpack(base64.b64decode(data))


def added_cte(param: str, *, where: ColumnElement[bool] | None = None, name: str) -> CTE:
    """PostgreSQL: the texts of the JSON parameter ``param`` (:func:`blob_params`) added
    to ``blobs`` as a data-modifying CTE, if ``where`` holds (packed, in base64)."""
    rows = (
        func.json_to_recordset(bindparam(param, type_=JSON))
        .table_valued(
            column("sha256", String), column("content", Text), column("size_bytes", Integer)
        )
        .render_derived(name=f"{name}_rows", with_types=True)
    )
    chosen = select(rows.c.sha256, func.decode(rows.c.content, "base64"), rows.c.size_bytes)
    if where is not None:
        chosen = chosen.where(where)
    return (
        postgresql.insert(blobs)
        .from_select(["sha256", "content", "size_bytes"], chosen)
        .on_conflict_do_nothing()
        .cte(name)
    )


_CONTENTS = select(blobs.c.sha256, blobs.c.content).where(
    blobs.c.sha256.in_(bindparam("shas", expanding=True))
)


def contents(conn: Connection, shas: Collection[str]) -> dict[str, str]:
    """The stored texts of ``shas``, by key."""
    if not shas:
        return {}
    rows = conn.execute(_CONTENTS, {"shas": sorted(shas)}).all()
    note_stored(conn, (r.sha256 for r in rows))
    return {r.sha256: r.content for r in rows}


class Apart(NamedTuple):
    """An event's payload as the log stores it."""

    payload: dict[str, Any]
    """The payload, each long string replaced by a marker."""
    refs: list[list[Any]] | None
    """``[path, sha256]`` of each string set apart (None: none was)."""
    blobs: list[Blob]
    """The strings set apart, to store."""


def set_apart(kind: str, payload: dict[str, Any]) -> Apart:
    """``payload`` with its long strings set apart (never changed in place: the parts it
    replaces in are copies).

    Args:
        kind: The event's kind: only :data:`SET_APART_KINDS` are set apart.
        payload: The event's payload (``to_payload()``).
    """
    if kind not in SET_APART_KINDS:
        return Apart(payload, None, [])
    refs: list[list[Any]] = []
    found: list[Blob] = []
    kept = _apart(payload, [], refs, found)
    return Apart(kept, refs or None, found)


def _apart(value: Any, path: list[Any], refs: list[list[Any]], found: list[Blob]) -> Any:
    if isinstance(value, str):
        if len(value) < BLOB_MIN_CHARS:
            return value
        blob = blob_of(value)
        refs.append([list(path), blob.sha256])
        found.append(blob)
        return {MARKER: blob.sha256}
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)  # type: ignore[assignment]
    else:
        return value
    changed: dict[Any, Any] = {}
    for key, item in items:
        path.append(key)
        kept = _apart(item, path, refs, found)
        path.pop()
        if kept is not item:
            changed[key] = kept
    if not changed:
        return value
    if isinstance(value, dict):
        return {**value, **changed}
    return [changed.get(i, item) for i, item in enumerate(value)]


def shas_of(refs: Iterable[Sequence[Any]] | None) -> set[str]:
    """The keys an event's ``blobs`` column names."""
    return {str(sha) for _, sha in refs or ()}


def restore(
    payload: dict[str, Any], refs: Sequence[Sequence[Any]] | None, texts: Mapping[str, str]
) -> dict[str, Any]:
    """``payload`` with the strings ``refs`` set apart put back (a copy where they go).

    Args:
        payload: The payload as stored.
        refs: The event's ``blobs`` column.
        texts: The stored texts, by key (:func:`contents`).

    Raises:
        LookupError: a text is not in ``texts`` (not stored).
    """
    if not refs:
        return payload
    root: dict[str, Any] = dict(payload)
    copied = {id(root)}
    for path, sha in refs:
        text = texts.get(sha)
        if text is None:
            raise LookupError(f"blob {sha} is not stored")
        node: Any = root
        for key in path[:-1]:
            child = node[key]
            if id(child) not in copied:
                child = dict(child) if isinstance(child, dict) else list(child)
                copied.add(id(child))
                node[key] = child
            node = child
        node[path[-1]] = text
    return root


def restore_all(
    conn: Connection, rows: Sequence[tuple[dict[str, Any], Sequence[Sequence[Any]] | None]]
) -> list[dict[str, Any]]:
    """The payloads of ``rows`` (``(payload, blobs)`` as stored) restored, their texts read
    in one query."""
    shas: set[str] = set()
    for _, refs in rows:
        shas |= shas_of(refs)
    texts = contents(conn, shas)
    return [restore(payload, refs, texts) for payload, refs in rows]
