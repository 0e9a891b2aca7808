"""A session's artifacts and plan in the database; what the tools read and write."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import (
    ARRAY,
    JSON,
    Boolean,
    String,
    Text,
    bindparam,
    delete,
    false,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import aggregate_order_by
from sqlalchemy.engine import Connection, Row
from sqlalchemy.sql.dml import Delete, Insert
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.selectable import CTE, ScalarSelect

from worker.store.blobs import Blob, add_blobs, blob_of, note_stored, sha256_of
from worker.store.claims import Claim
from worker.store.tables import artifact_versions as versions
from worker.store.tables import artifacts, blobs, plans, sessions, unpack
from worker.store.turns import holds_lease


@dataclass(frozen=True)
class ArtifactState:
    """An artifact as its session currently sees it."""

    id: int
    name: str
    version: int
    content: str | None
    """Its text; None where it was not read (:class:`Snapshot`)."""
    deleted: bool
    version_id: int | None = None
    """Primary key of the current version's row."""
    sha256: str = ""
    """The key of its text in ``blobs``."""


@dataclass
class Snapshot:
    """A session's workspace as its turn found it, read under the lease's row lock, and
    kept as the turn's calls change it: only the lease holder writes a session's workspace,
    inside its turn's transaction, so it stays the workspace until the turn commits."""

    plan: list[PlanEntry]
    artifacts: dict[str, ArtifactState]
    """Every artifact by name, deleted ones too; ``content`` None where it was not read."""
    contents: frozenset[str] | None
    """Names whose text was read; None: every live artifact's."""

    def has_content(self, name: str) -> bool:
        """Whether artifact ``name``'s text was read (or it has none to read)."""
        current = self.artifacts.get(name)
        return current is None or current.content is not None or current.deleted

    def live_files(self) -> dict[str, str] | None:
        """Every live artifact's text by name, if all were read."""
        if self.contents is not None:
            return None
        live: dict[str, str] = {}
        for name in sorted(self.artifacts):
            current = self.artifacts[name]
            if current.deleted:
                continue
            if current.content is None:
                return None
            live[name] = current.content
        return live


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
        .returning(versions.c.artifact_id, versions.c.version, versions.c.id)
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
        row.id,
        row.name,
        row.version,
        row.content,
        row.deleted_at is not None,
        row.version_id,
        sha256=row.sha256,
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


class Written(NamedTuple):
    """A version :func:`write_artifact` wrote."""

    artifact_id: int
    version: int
    version_id: int
    sha256: str


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
) -> Written | None:
    """Write a new version by compare-and-swap; create when ``expected_version`` is None.

    The content is stored once (:mod:`worker.store.blobs`); the artifact and its version
    row hold its SHA-256.

    Returns the version written, or None when the CAS lost (the version moved on).
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
            row: Row[Any] | None = conn.execute(_CREATE_AND_KEEP, params).one()
        else:
            row = conn.execute(_SWAP_AND_KEEP, params | {"b_expected": expected_version}).first()
        # The page was stored even if the swap lost: the commit of the call need not send it.
        note_stored(conn, [sha256])
        return None if row is None else Written(row.artifact_id, row.version, row.id, sha256)
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
        swapped = conn.execute(_SWAP_ARTIFACT, params | {"b_expected": expected_version}).first()
        if swapped is None:
            return None
        artifact_id, version = swapped.id, expected_version + 1
    version_id = conn.execute(
        _ADD_VERSION.returning(versions.c.id),
        {
            "artifact_id": artifact_id,
            "version": version,
            "turn_no": turn_no,
            "sha256": sha256,
            "size_bytes": size_bytes,
            "created_at": now,
        },
    ).scalar_one()
    return Written(artifact_id, version, version_id, sha256)


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


def _set_plan_pg() -> Delete:
    """The plan written in one statement (PostgreSQL): its items put in place, numbered
    from 1 (an item of that number replaced), and the items of the old plan beyond them
    removed."""
    item = (
        func.unnest(bindparam("b_items", type_=ARRAY(Text)))
        .table_valued("text", with_ordinality="item_no")
        .render_derived(name="item")
    )
    insert_items = postgresql.insert(plans).from_select(
        ["session_id", "item_no", "text", "done", "set_turn"],
        select(
            bindparam("b_session_id", type_=plans.c.session_id.type),
            item.c.item_no,
            item.c.text,
            false(),
            bindparam("b_turn_no", type_=plans.c.set_turn.type),
        ),
    )
    put = insert_items.on_conflict_do_update(
        index_elements=[plans.c.session_id, plans.c.item_no],
        set_={
            "text": insert_items.excluded.text,
            "done": false(),
            "set_turn": insert_items.excluded.set_turn,
            "done_turn": None,
        },
    ).cte("put")
    return (
        delete(plans)
        .where(
            plans.c.session_id == bindparam("b_session_id"),
            plans.c.item_no > bindparam("b_count", type_=plans.c.item_no.type),
        )
        .add_cte(put)
    )


_SET_PLAN_PG = _set_plan_pg()


def set_plan(conn: Connection, *, session_id: int, items: list[str], turn_no: int) -> None:
    """Replace the session's plan with ``items`` (numbered from 1)."""
    if conn.dialect.name == "postgresql":
        conn.execute(
            _SET_PLAN_PG,
            {
                "b_session_id": session_id,
                "b_items": items,
                "b_turn_no": turn_no,
                "b_count": len(items),
            },
        )
        return
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


#: Names of artifacts the workspace statement reads the text of (None: every live one).
ContentsWanted = frozenset[str] | None


def _snapshot_query(session_id: ColumnElement[Any]) -> tuple[ScalarSelect[Any], ...]:
    """The plan and the artifacts of ``session_id`` as two JSON arrays (PostgreSQL): the
    plan as ``[item_no, text, done]``, each artifact as ``[id, name, version, sha256,
    deleted, version_id, text]`` with its text base64 of the stored bytes, or NULL where
    not wanted (``b_all_texts``, or its name in ``b_text_names``)."""
    plan = (
        select(
            func.json_agg(
                aggregate_order_by(
                    func.json_build_array(plans.c.item_no, plans.c.text, plans.c.done),
                    plans.c.item_no,
                ),
                type_=JSON,
            )
        )
        .where(plans.c.session_id == session_id)
        .scalar_subquery()
    )
    wanted = artifacts.c.deleted_at.is_(None) & (
        bindparam("b_all_texts", type_=Boolean)
        | (artifacts.c.name == func.any(bindparam("b_text_names", type_=ARRAY(String))))
    )
    text = (
        select(func.encode(blobs.c.content, "base64"))
        .where(blobs.c.sha256 == artifacts.c.sha256, wanted)
        .correlate(artifacts)
        .scalar_subquery()
    )
    found = (
        select(
            func.json_agg(
                aggregate_order_by(
                    func.json_build_array(
                        artifacts.c.id,
                        artifacts.c.name,
                        artifacts.c.version,
                        artifacts.c.sha256,
                        artifacts.c.deleted_at.is_not(None),
                        versions.c.id,
                        text,
                    ),
                    artifacts.c.name,
                ),
                type_=JSON,
            )
        )
        .select_from(
            artifacts.outerjoin(
                versions,
                (versions.c.artifact_id == artifacts.c.id)
                & (versions.c.version == artifacts.c.version),
            )
        )
        .where(artifacts.c.session_id == session_id)
        .scalar_subquery()
    )
    return plan, found


def snapshot_params(contents: ContentsWanted) -> dict[str, Any]:
    """The parameters of :func:`_snapshot_query` for the texts wanted."""
    return {"b_all_texts": contents is None, "b_text_names": sorted(contents or ())}


def snapshot_of(
    conn: Connection, plan_rows: Any, artifact_rows: Any, contents: ContentsWanted
) -> Snapshot:
    """A snapshot from the two JSON arrays of :func:`_snapshot_query`."""
    found: dict[str, ArtifactState] = {}
    for artifact_id, name, version, sha256, deleted, version_id, packed in artifact_rows or ():
        text = None if packed is None else unpack(base64.b64decode(packed))
        found[name] = ArtifactState(
            artifact_id, name, version, text, deleted, version_id, sha256=sha256
        )
    # A call that reads a page may log it (a ``get``): the commit need not send it again.
    note_stored(conn, [a.sha256 for a in found.values() if a.content is not None])
    return Snapshot(
        plan=[PlanEntry(no, text, done) for no, text, done in plan_rows or ()],
        artifacts=found,
        contents=contents,
    )


def load_snapshot(conn: Connection, *, session_id: int, contents: ContentsWanted) -> Snapshot:
    """The session's workspace now, with the texts wanted (any database)."""
    rows = conn.execute(
        select(
            artifacts.c.id,
            artifacts.c.name,
            artifacts.c.version,
            artifacts.c.sha256,
            artifacts.c.deleted_at,
            versions.c.id.label("version_id"),
        )
        .outerjoin(
            versions,
            (versions.c.artifact_id == artifacts.c.id)
            & (versions.c.version == artifacts.c.version),
        )
        .where(artifacts.c.session_id == session_id)
    ).all()
    wanted = [
        r.sha256 for r in rows if r.deleted_at is None and (contents is None or r.name in contents)
    ]
    texts = (
        dict(
            conn.execute(select(blobs.c.sha256, blobs.c.content).where(blobs.c.sha256.in_(wanted)))
            .tuples()
            .all()
        )
        if wanted
        else {}
    )
    note_stored(conn, texts)
    return Snapshot(
        plan=get_plan(conn, session_id=session_id),
        artifacts={
            r.name: ArtifactState(
                r.id,
                r.name,
                r.version,
                texts.get(r.sha256) if r.deleted_at is None else None,
                r.deleted_at is not None,
                r.version_id,
                sha256=r.sha256,
            )
            for r in rows
        },
        contents=contents,
    )


_LOCK_AND_READ_PG = (
    select(sessions.c.id, *_snapshot_query(sessions.c.id))
    .where(
        sessions.c.id == bindparam("b_session_id"),
        sessions.c.lease_epoch == bindparam("b_epoch"),
        sessions.c.next_turn == bindparam("b_turn_no"),
    )
    .with_for_update(of=sessions)
)


def lock_workspace(conn: Connection, *, claim: Claim, contents: ContentsWanted) -> Snapshot | None:
    """While ``claim`` is the session's lease, lock the session's row and read its workspace
    with the texts ``contents`` names: one statement on PostgreSQL.

    Returns None when the lease moved on (another worker took the session over).
    """
    if conn.dialect.name != "postgresql":
        if not holds_lease(conn, claim=claim):
            return None
        return load_snapshot(conn, session_id=claim.session_id, contents=contents)
    row = conn.execute(
        _LOCK_AND_READ_PG,
        {"b_session_id": claim.session_id, "b_epoch": claim.epoch, "b_turn_no": claim.turn_no}
        | snapshot_params(contents),
    ).first()
    return None if row is None else snapshot_of(conn, row[1], row[2], contents)
