"""A session's artifacts and plan in the database; what the tools read and write."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, delete, insert, select, update
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection
from sqlalchemy.sql.dml import Insert
from sqlalchemy.sql.selectable import CTE

from worker.store.blobs import Blob, add_blobs, blob_of, note_stored, sha256_of
from worker.store.tables import artifact_versions as versions
from worker.store.tables import artifacts, blobs, plans


@dataclass(frozen=True)
class ArtifactState:
    """An artifact as its session currently sees it."""

    id: int
    name: str
    version: int
    content: str
    deleted: bool
    version_id: int | None = None
    """Primary key of the current version's row."""


@dataclass(frozen=True)
class PlanEntry:
    """One plan item."""

    item_no: int
    text: str
    done: bool


# Statements most turns run, built once so their SQL is compiled once.
_GET_ARTIFACT = (
    select(
        artifacts.c.id,
        artifacts.c.name,
        artifacts.c.version,
        artifacts.c.sha256,
        blobs.c.content,
        artifacts.c.deleted_at,
        versions.c.id.label("version_id"),
    )
    .join(blobs, blobs.c.sha256 == artifacts.c.sha256)
    .outerjoin(
        versions,
        (versions.c.artifact_id == artifacts.c.id) & (versions.c.version == artifacts.c.version),
    )
    .where(
        artifacts.c.session_id == bindparam("b_session_id"),
        artifacts.c.name == bindparam("b_name"),
    )
)
_SWAP_ARTIFACT = (
    update(artifacts)
    .where(
        artifacts.c.session_id == bindparam("b_session_id"),
        artifacts.c.name == bindparam("b_name"),
        artifacts.c.version == bindparam("b_expected"),
    )
    .values(
        version=artifacts.c.version + 1,
        sha256=bindparam("b_sha256", type_=artifacts.c.sha256.type),
        size_bytes=bindparam("b_size", type_=artifacts.c.size_bytes.type),
        updated_at=bindparam("b_now", type_=artifacts.c.updated_at.type),
        deleted_at=None,
    )
    .returning(artifacts.c.id)
)
_ADD_VERSION = insert(versions)
_VERSION_COLUMNS = ["artifact_id", "version", "turn_no", "sha256", "size_bytes", "created_at"]
#: PostgreSQL: the page, unless it is stored already.
_PAGE_ADDED = (
    postgresql.insert(blobs)
    .values(
        sha256=bindparam("b_sha256", type_=blobs.c.sha256.type),
        content=bindparam("b_content", type_=blobs.c.content.type),
        size_bytes=bindparam("b_size", type_=blobs.c.size_bytes.type),
    )
    .on_conflict_do_nothing()
    .cte("page_added")
)


def _keep(written: CTE) -> Insert:
    """The version row of the artifact row ``written`` returns, after its page (PostgreSQL)."""
    return (
        insert(versions)
        .from_select(
            _VERSION_COLUMNS,
            select(
                written.c.id,
                written.c.version,
                bindparam("b_turn_no", type_=versions.c.turn_no.type),
                written.c.sha256,
                written.c.size_bytes,
                written.c.updated_at,
            ),
        )
        .add_cte(_PAGE_ADDED, written)
        .returning(versions.c.version)
    )


_WRITTEN_COLUMNS = (
    artifacts.c.version,
    artifacts.c.sha256,
    artifacts.c.size_bytes,
    artifacts.c.updated_at,
)
#: The page, the swap and its version row in one statement (PostgreSQL): the page is sent
#: once, and stored once however many versions and sessions hold it.
_SWAP_AND_KEEP = _keep(_SWAP_ARTIFACT.returning(*_WRITTEN_COLUMNS).cte("swapped"))
#: The page, a new artifact and its first version in one statement (PostgreSQL).
_CREATE_AND_KEEP = _keep(
    insert(artifacts)
    .values(
        session_id=bindparam("b_session_id", type_=artifacts.c.session_id.type),
        name=bindparam("b_name", type_=artifacts.c.name.type),
        version=1,
        sha256=bindparam("b_sha256", type_=artifacts.c.sha256.type),
        size_bytes=bindparam("b_size", type_=artifacts.c.size_bytes.type),
        updated_at=bindparam("b_now", type_=artifacts.c.updated_at.type),
    )
    .returning(artifacts.c.id, *_WRITTEN_COLUMNS)
    .cte("created")
)


def get_artifact(conn: Connection, *, session_id: int, name: str) -> ArtifactState | None:
    """The current state of a session's artifact, or None if it never existed."""
    row = conn.execute(_GET_ARTIFACT, {"b_session_id": session_id, "b_name": name}).first()
    if row is None:
        return None
    # A call that reads the page may log it (a ``get``): the commit need not send it again.
    note_stored(conn, [row.sha256])
    return ArtifactState(
        row.id, row.name, row.version, row.content, row.deleted_at is not None, row.version_id
    )


def live_files(conn: Connection, *, session_id: int) -> dict[str, str]:
    """The session's live artifacts, by name."""
    rows = conn.execute(
        select(artifacts.c.name, blobs.c.content)
        .join(blobs, blobs.c.sha256 == artifacts.c.sha256)
        .where(artifacts.c.session_id == session_id, artifacts.c.deleted_at.is_(None))
        .order_by(artifacts.c.name)
    ).all()
    return {r.name: r.content for r in rows}


#: The turn number that version 0 of a starting file records: it was there before turn 0.
START_TURN = -1


def seed_files(
    conn: Connection, *, session_ids: list[int], files: list[dict[str, str]], now: datetime
) -> None:
    """Give each session its starting files as version 0 (``files[i]`` for ``session_ids[i]``).

    Sessions that start with the same file share its one stored copy.
    """
    stored: dict[str, Blob] = {}
    rows: list[dict[str, Any]] = []
    for session_id, start in zip(session_ids, files, strict=True):
        for name, content in start.items():
            blob = stored.get(content) or blob_of(content)
            stored[content] = blob
            rows.append(
                {
                    "session_id": session_id,
                    "name": name,
                    "version": 0,
                    "sha256": blob.sha256,
                    "size_bytes": blob.size_bytes,
                    "updated_at": now,
                }
            )
    if not rows:
        return
    add_blobs(conn, stored.values())
    ids = conn.execute(
        insert(artifacts).returning(artifacts.c.id, sort_by_parameter_order=True), rows
    ).scalars()
    conn.execute(
        insert(versions),
        [
            {
                "artifact_id": artifact_id,
                "version": 0,
                "turn_no": START_TURN,
                "sha256": row["sha256"],
                "size_bytes": row["size_bytes"],
                "created_at": now,
            }
            for artifact_id, row in zip(ids, rows, strict=True)
        ],
    )


def artifact_names(conn: Connection, *, session_id: int) -> list[str]:
    """Names of the session's live artifacts."""
    return list(
        conn.execute(
            select(artifacts.c.name)
            .where(artifacts.c.session_id == session_id, artifacts.c.deleted_at.is_(None))
            .order_by(artifacts.c.name)
        ).scalars()
    )


def write_artifact(
    conn: Connection,
    *,
    session_id: int,
    name: str,
    content: str,
    size_bytes: int,
    expected_version: int | None,
    turn_no: int,
    now: datetime,
) -> int | None:
    """Write a new version by compare-and-swap; create when ``expected_version`` is None.

    The content is stored once (:mod:`worker.store.blobs`); the artifact and its version
    row hold its SHA-256.

    Returns the new version number, or None when the CAS lost (the version moved on).
    """
    sha256 = sha256_of(content)
    params = {
        "b_session_id": session_id,
        "b_name": name,
        "b_sha256": sha256,
        "b_size": size_bytes,
        "b_now": now,
    }
    if conn.dialect.name == "postgresql":
        params |= {"b_turn_no": turn_no, "b_content": content}
        if expected_version is None:
            created = int(conn.execute(_CREATE_AND_KEEP, params).scalar_one())
            note_stored(conn, [sha256])
            return created
        swapped = conn.execute(_SWAP_AND_KEEP, params | {"b_expected": expected_version}).scalar()
        # The page was stored even if the swap lost: the commit of the call need not send it.
        note_stored(conn, [sha256])
        return swapped
    add_blobs(conn, [Blob(sha256, content, size_bytes)])
    if expected_version is None:
        result = conn.execute(
            insert(artifacts)
            .values(
                session_id=session_id,
                name=name,
                version=1,
                sha256=sha256,
                size_bytes=size_bytes,
                updated_at=now,
            )
            .returning(artifacts.c.id)
        )
        artifact_id, version = result.scalar_one(), 1
    else:
        row = conn.execute(_SWAP_ARTIFACT, params | {"b_expected": expected_version}).first()
        if row is None:
            return None
        artifact_id, version = row.id, expected_version + 1
    conn.execute(
        _ADD_VERSION,
        {
            "artifact_id": artifact_id,
            "version": version,
            "turn_no": turn_no,
            "sha256": sha256,
            "size_bytes": size_bytes,
            "created_at": now,
        },
    )
    return version


def mark_deleted(
    conn: Connection, *, artifact_id: int, expected_version: int, now: datetime
) -> bool:
    """Soft-delete an artifact (its versions stay); False when the CAS lost."""
    result = conn.execute(
        update(artifacts)
        .where(artifacts.c.id == artifact_id, artifacts.c.version == expected_version)
        .values(deleted_at=now, updated_at=now)
    )
    return result.rowcount == 1


_GET_PLAN = (
    select(plans.c.item_no, plans.c.text, plans.c.done)
    .where(plans.c.session_id == bindparam("b_session_id"))
    .order_by(plans.c.item_no)
)
_MARK_PLAN_DONE = (
    update(plans)
    .where(
        plans.c.session_id == bindparam("b_session_id"),
        plans.c.item_no == bindparam("b_item_no"),
    )
    .values(done=True, done_turn=bindparam("b_turn_no", type_=plans.c.done_turn.type))
)


def get_plan(conn: Connection, *, session_id: int) -> list[PlanEntry]:
    """The session's plan, in order."""
    rows = conn.execute(_GET_PLAN, {"b_session_id": session_id}).all()
    return [PlanEntry(r.item_no, r.text, r.done) for r in rows]


def set_plan(conn: Connection, *, session_id: int, items: list[str], turn_no: int) -> None:
    """Replace the session's plan with ``items`` (numbered from 1)."""
    conn.execute(delete(plans).where(plans.c.session_id == session_id))
    conn.execute(
        insert(plans),
        [
            {
                "session_id": session_id,
                "item_no": i,
                "text": text,
                "done": False,
                "set_turn": turn_no,
            }
            for i, text in enumerate(items, start=1)
        ],
    )


def mark_plan_done(conn: Connection, *, session_id: int, item_no: int, turn_no: int) -> bool:
    """Mark one item done; False if there is no such item."""
    result = conn.execute(
        _MARK_PLAN_DONE, {"b_session_id": session_id, "b_item_no": item_no, "b_turn_no": turn_no}
    )
    return result.rowcount == 1
