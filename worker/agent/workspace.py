"""A session's artifacts and plan in the database; what the tools read and write."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, delete, insert, select, update
from sqlalchemy.engine import Connection

from worker.store.tables import artifact_versions as versions
from worker.store.tables import artifacts, plans


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
        artifacts.c.content,
        artifacts.c.deleted_at,
        versions.c.id.label("version_id"),
    )
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
        content=bindparam("b_content", type_=artifacts.c.content.type),
        size_bytes=bindparam("b_size", type_=artifacts.c.size_bytes.type),
        updated_at=bindparam("b_now", type_=artifacts.c.updated_at.type),
        deleted_at=None,
    )
    .returning(artifacts.c.id)
)
_ADD_VERSION = insert(versions)
_SWAPPED = _SWAP_ARTIFACT.returning(
    artifacts.c.version, artifacts.c.content, artifacts.c.size_bytes, artifacts.c.updated_at
).cte("swapped")
#: The swap and its version row in one statement (PostgreSQL): the page is sent once.
_SWAP_AND_KEEP = (
    insert(versions)
    .from_select(
        ["artifact_id", "version", "turn_no", "content", "sha256", "size_bytes", "created_at"],
        select(
            _SWAPPED.c.id,
            _SWAPPED.c.version,
            bindparam("b_turn_no", type_=versions.c.turn_no.type),
            _SWAPPED.c.content,
            bindparam("b_sha256", type_=versions.c.sha256.type),
            _SWAPPED.c.size_bytes,
            _SWAPPED.c.updated_at,
        ),
    )
    .add_cte(_SWAPPED)
    .returning(versions.c.version)
)


def get_artifact(conn: Connection, *, session_id: int, name: str) -> ArtifactState | None:
    """The current state of a session's artifact, or None if it never existed."""
    row = conn.execute(_GET_ARTIFACT, {"b_session_id": session_id, "b_name": name}).first()
    if row is None:
        return None
    return ArtifactState(
        row.id, row.name, row.version, row.content, row.deleted_at is not None, row.version_id
    )


def live_files(conn: Connection, *, session_id: int) -> dict[str, str]:
    """The session's live artifacts, by name."""
    rows = conn.execute(
        select(artifacts.c.name, artifacts.c.content)
        .where(artifacts.c.session_id == session_id, artifacts.c.deleted_at.is_(None))
        .order_by(artifacts.c.name)
    ).all()
    return {r.name: r.content for r in rows}


#: The turn number that version 0 of a starting file records: it was there before turn 0.
START_TURN = -1


def seed_files(
    conn: Connection, *, session_ids: list[int], files: list[dict[str, str]], now: datetime
) -> None:
    """Give each session its starting files as version 0 (``files[i]`` for ``session_ids[i]``)."""
    rows: list[dict[str, Any]] = [
        {
            "session_id": session_id,
            "name": name,
            "version": 0,
            "content": content,
            "size_bytes": len(content.encode()),
            "updated_at": now,
        }
        for session_id, start in zip(session_ids, files, strict=True)
        for name, content in start.items()
    ]
    if not rows:
        return
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
                "content": row["content"],
                "sha256": _sha256(row["content"]),
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

    Returns the new version number, or None when the CAS lost (the version moved on).
    """
    if expected_version is None:
        result = conn.execute(
            insert(artifacts)
            .values(
                session_id=session_id,
                name=name,
                version=1,
                content=content,
                size_bytes=size_bytes,
                updated_at=now,
            )
            .returning(artifacts.c.id)
        )
        artifact_id, version = result.scalar_one(), 1
    else:
        swap = {
            "b_session_id": session_id,
            "b_name": name,
            "b_expected": expected_version,
            "b_content": content,
            "b_size": size_bytes,
            "b_now": now,
        }
        if conn.dialect.name == "postgresql":
            swap |= {"b_turn_no": turn_no, "b_sha256": _sha256(content)}
            return conn.execute(_SWAP_AND_KEEP, swap).scalar()
        row = conn.execute(_SWAP_ARTIFACT, swap).first()
        if row is None:
            return None
        artifact_id, version = row.id, expected_version + 1
    conn.execute(
        _ADD_VERSION,
        {
            "artifact_id": artifact_id,
            "version": version,
            "turn_no": turn_no,
            "content": content,
            "sha256": _sha256(content),
            "size_bytes": size_bytes,
            "created_at": now,
        },
    )
    return version


def _sha256(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()


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
