"""A session as it was recorded: its event log by turn, and every version of its artifacts.

What replay re-enacts and checks, and what a fork copies. Every function takes an open
:class:`~sqlalchemy.engine.Connection`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import NoResultFound

from worker.errors import InputError
from worker.store.blobs import restore_all
from worker.store.sessions import SessionView, load_session
from worker.store.tables import artifact_versions, artifacts, blobs, events, verifications


@dataclass(frozen=True)
class LoggedEvent:
    """One row of a session's event log."""

    turn_no: int
    seq: int
    kind: str
    payload: dict[str, Any]


@dataclass(frozen=True)
class RecordedVersion:
    """One version of one artifact, with the turn that wrote it."""

    name: str
    version: int
    turn_no: int
    content: str
    sha256: str


def find_session(conn: Connection, *, session_id: int) -> SessionView:
    """The session, its run's settings and its events (what a turn loads).

    Raises:
        InputError: no session has that id.
    """
    try:
        return load_session(conn, session_id=session_id)
    except NoResultFound:
        raise InputError(f"no session {session_id}") from None


def session_log(conn: Connection, *, session_id: int) -> list[LoggedEvent]:
    """The session's events in log order, their payloads whole."""
    rows = conn.execute(
        select(events.c.turn_no, events.c.seq, events.c.kind, events.c.payload, events.c.blobs)
        .where(events.c.session_id == session_id)
        .order_by(events.c.turn_no, events.c.seq)
    ).all()
    payloads = restore_all(conn, [(r.payload, r.blobs) for r in rows])
    return [
        LoggedEvent(r.turn_no, r.seq, r.kind, payload)
        for r, payload in zip(rows, payloads, strict=True)
    ]


#: Artifact versions with their artifact's name, as :class:`RecordedVersion` reads them.
_VERSIONS = (
    select(
        artifacts.c.name,
        artifact_versions.c.version,
        artifact_versions.c.turn_no,
        blobs.c.content,
        artifact_versions.c.sha256,
    )
    .join(artifacts, artifacts.c.id == artifact_versions.c.artifact_id)
    .join(blobs, blobs.c.sha256 == artifact_versions.c.sha256)
)


def artifact_history(conn: Connection, *, session_id: int) -> list[RecordedVersion]:
    """Every version of every artifact of the session, by name then version."""
    rows = conn.execute(
        _VERSIONS.where(artifacts.c.session_id == session_id).order_by(
            artifacts.c.name, artifact_versions.c.version
        )
    ).all()
    return [RecordedVersion(r.name, r.version, r.turn_no, r.content, r.sha256) for r in rows]


def artifact_version(
    conn: Connection, *, session_id: int, name: str, version: int
) -> RecordedVersion:
    """One version of one of the session's artifacts.

    Raises:
        InputError: the session has no such artifact version.
    """
    row = conn.execute(
        _VERSIONS.where(
            artifacts.c.session_id == session_id,
            artifacts.c.name == name,
            artifact_versions.c.version == version,
        )
    ).first()
    if row is None:
        raise InputError(f"session {session_id} has no {name} v{version}")
    return RecordedVersion(row.name, row.version, row.turn_no, row.content, row.sha256)


@dataclass(frozen=True)
class RecordedVerdict:
    """One verdict of a session: the round, what it judged, and what it found."""

    round: int
    name: str
    """The handed-off artifact."""
    version: int
    passed: bool
    method: str
    checks: list[dict[str, Any]]


def verdict_history(conn: Connection, *, session_id: int) -> list[RecordedVerdict]:
    """Every verdict of the session, by round."""
    rows = conn.execute(
        select(
            verifications.c.round,
            artifacts.c.name,
            artifact_versions.c.version,
            verifications.c.passed,
            verifications.c.method,
            verifications.c.checks,
        )
        .join(artifact_versions, artifact_versions.c.id == verifications.c.artifact_version_id)
        .join(artifacts, artifacts.c.id == artifact_versions.c.artifact_id)
        .where(verifications.c.session_id == session_id)
        .order_by(verifications.c.round)
    ).all()
    return [
        RecordedVerdict(r.round, r.name, r.version, bool(r.passed), r.method, list(r.checks))
        for r in rows
    ]
