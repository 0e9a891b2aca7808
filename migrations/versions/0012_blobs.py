"""a page is stored once: text addressed by its SHA-256, shared by events and artifacts

A page the model wrote was stored three times: in its call's arguments (the model output
event), as the artifact, and as the artifact's version row. Now the text is one row of
``blobs``, keyed by the SHA-256 of its UTF-8 bytes, and shared by all three and by every
session that wrote the same bytes. The worker compresses it (zlib) before it is sent; the
database stores those bytes as they are, out of line, without compressing them again.
``artifacts`` and ``artifact_versions`` keep the key (``sha256``) instead of the text; the
events that can carry a page (model outputs and tool results) keep, in place of each string
of 1,024 characters or more, a marker ``{"$blob": sha256}``, and in a new column ``blobs``
where each was (``[[path, sha256], ...]``).

The upgrade moves every row written before; the downgrade puts every text back in place.
The verify role reads the texts of what it judges: it may read ``blobs``.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03 14:30:00.000000
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The verify worker's role (made by revision 0006).
VERIFY_ROLE = "swarm_verify"
#: Event kinds whose long strings are kept apart, and how long is long.
SET_APART_KINDS = ("model", "tool_result")
BLOB_MIN_CHARS = 1024
#: The key of the marker left in a payload where a string was.
MARKER = "$blob"
#: Rows read at a time.
BATCH_ROWS = 500
#: zlib's level for stored texts.
PACK_LEVEL = 1

_blobs = sa.table(
    "blobs",
    sa.column("sha256", sa.String()),
    sa.column("content", sa.LargeBinary()),
    sa.column("size_bytes", sa.Integer()),
)
_events = sa.table(
    "events",
    sa.column("id", sa.BigInteger()),
    sa.column("kind", sa.String()),
    sa.column("payload", sa.JSON()),
    sa.column("blobs", sa.JSON(none_as_null=True)),
)
#: The tables that held a page each: ``artifacts`` and ``artifact_versions``.
_PAGES = {
    name: sa.table(
        name,
        sa.column("id", sa.BigInteger()),
        sa.column("content", sa.Text()),
        sa.column("sha256", sa.String()),
    )
    for name in ("artifacts", "artifact_versions")
}


def upgrade() -> None:
    op.create_table(
        "blobs",
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("content", sa.LargeBinary(), nullable=False),
        sa.Column("size_bytes", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("sha256", name=op.f("pk_blobs")),
    )
    if op.get_bind().dialect.name == "postgresql":
        # Compressed already: kept out of line as it is.
        op.execute("ALTER TABLE blobs ALTER COLUMN content SET STORAGE EXTERNAL")
    with op.batch_alter_table("artifacts") as batch:
        batch.add_column(sa.Column("sha256", sa.String(64), nullable=True))
    _store_pages()
    with op.batch_alter_table("artifacts") as batch:
        batch.alter_column("sha256", existing_type=sa.String(64), nullable=False)
        batch.drop_column("content")
    with op.batch_alter_table("artifact_versions") as batch:
        batch.drop_column("content")
    with op.batch_alter_table("events") as batch:
        batch.add_column(sa.Column("blobs", sa.JSON(), nullable=True))
    _set_events_apart()
    _on_verify_role(f"GRANT SELECT ON blobs TO {VERIFY_ROLE}")


def downgrade() -> None:
    _on_verify_role(f"REVOKE SELECT ON blobs FROM {VERIFY_ROLE}")
    _put_events_back()
    with op.batch_alter_table("events") as batch:
        batch.drop_column("blobs")
    for name in _PAGES:
        with op.batch_alter_table(name) as batch:
            batch.add_column(sa.Column("content", sa.Text(), nullable=True))
        _put_pages_back(name)
        with op.batch_alter_table(name) as batch:
            batch.alter_column("content", existing_type=sa.Text(), nullable=False)
        if _lz4_available():  # as revision 0009 left it
            op.execute(f"ALTER TABLE {name} ALTER COLUMN content SET COMPRESSION lz4")
    with op.batch_alter_table("artifacts") as batch:
        batch.drop_column("sha256")
    op.drop_table("blobs")


def _store_pages() -> None:
    """Store every artifact's and version's text once, and key the artifacts by it (a
    version's key was computed from its text when it was written)."""
    bind = op.get_bind()
    for name, table in _PAGES.items():
        for rows in _batches(table, table.c.content, table.c.sha256):
            keys = [_add_blob(row.content, known=row.sha256) for row in rows]
            if name == "artifacts":
                bind.execute(
                    sa.update(table)
                    .where(table.c.id == sa.bindparam("b_id"))
                    .values(sha256=sa.bindparam("b_sha256")),
                    [{"b_id": row.id, "b_sha256": k} for row, k in zip(rows, keys, strict=True)],
                )


def _put_pages_back(name: str) -> None:
    bind = op.get_bind()
    table = _PAGES[name]
    for rows in _batches(table, table.c.sha256):
        texts = _texts({row.sha256 for row in rows})
        bind.execute(
            sa.update(table)
            .where(table.c.id == sa.bindparam("b_id"))
            .values(content=sa.bindparam("b_content")),
            [{"b_id": row.id, "b_content": texts[row.sha256]} for row in rows],
        )


def _batches(table: sa.TableClause, *columns: sa.ColumnClause[Any]) -> Iterator[list[Any]]:
    """``table``'s rows (their id and ``columns``), a batch at a time, in id order."""
    bind = op.get_bind()
    last = -1
    while True:
        rows = bind.execute(
            sa.select(table.c.id, *columns)
            .where(table.c.id > last)
            .order_by(table.c.id)
            .limit(BATCH_ROWS)
        ).all()
        if not rows:
            return
        yield rows
        last = rows[-1].id


def _set_events_apart() -> None:
    bind = op.get_bind()
    for row in _event_rows(_events.c.kind.in_(SET_APART_KINDS)):
        refs: list[list[Any]] = []
        payload = _apart(row.payload, [], refs)
        if refs:
            bind.execute(
                sa.update(_events).where(_events.c.id == row.id).values(payload=payload, blobs=refs)
            )


def _put_events_back() -> None:
    bind = op.get_bind()
    for row in _event_rows(_events.c.blobs.isnot(None)):
        refs = row.blobs or []
        texts = _texts({sha for _, sha in refs})
        payload = row.payload
        for path, sha in refs:
            node = payload
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = texts[sha]
        bind.execute(sa.update(_events).where(_events.c.id == row.id).values(payload=payload))


def _texts(shas: set[str]) -> dict[str, str]:
    rows = op.get_bind().execute(
        sa.select(_blobs.c.sha256, _blobs.c.content).where(_blobs.c.sha256.in_(sorted(shas)))
    )
    return {sha: zlib.decompress(data).decode() for sha, data in rows}


def _event_rows(where: sa.ColumnElement[bool]) -> Iterator[Any]:
    """The events matching ``where``, in batches by id (the caller updates them meanwhile)."""
    bind = op.get_bind()
    last = -1
    while True:
        rows = bind.execute(
            sa.select(_events.c.id, _events.c.payload, _events.c.blobs)
            .where(where, _events.c.id > last)
            .order_by(_events.c.id)
            .limit(BATCH_ROWS)
        ).all()
        if not rows:
            return
        yield from rows
        last = rows[-1].id


def _apart(value: Any, path: list[Any], refs: list[list[Any]]) -> Any:
    """``value`` with each long string stored and replaced by a marker, noted in ``refs``."""
    if isinstance(value, str):
        if len(value) < BLOB_MIN_CHARS:
            return value
        sha = _add_blob(value)
        refs.append([list(path), sha])
        return {MARKER: sha}
    if isinstance(value, dict):
        return {k: _apart(v, [*path, k], refs) for k, v in value.items()}
    if isinstance(value, list):
        return [_apart(v, [*path, i], refs) for i, v in enumerate(value)]
    return value


def _add_blob(text: str, known: str | None = None) -> str:
    """Store ``text`` unless it is there; returns its key."""
    data = text.encode()
    sha = hashlib.sha256(data).hexdigest()
    if known is not None and known != sha:
        raise ValueError(f"a version recorded as {known} hashes to {sha}")
    bind = op.get_bind()
    if bind.execute(sa.select(_blobs.c.sha256).where(_blobs.c.sha256 == sha)).first() is None:
        packed = zlib.compress(data, PACK_LEVEL)
        bind.execute(sa.insert(_blobs).values(sha256=sha, content=packed, size_bytes=len(data)))
    return sha


def _lz4_available() -> bool:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return False
    offered = bind.execute(
        sa.text("SELECT enumvals FROM pg_settings WHERE name = 'default_toast_compression'")
    ).scalar()
    return offered is not None and "lz4" in offered


def _on_verify_role(statement: str) -> None:
    """Run ``statement`` on PostgreSQL when the verify role exists (0006 may not have made it)."""
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        f"""
        DO $$
        BEGIN
            IF EXISTS (SELECT FROM pg_roles WHERE rolname = '{VERIFY_ROLE}') THEN
                EXECUTE '{statement}';
            END IF;
        END
        $$
        """
    )
