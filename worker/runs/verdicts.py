"""What a verdict does to its session: success, a repair round, or failure."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.engine import Connection, Row
from sqlalchemy.sql import ColumnElement, Select

from worker.agent.verdict import VerdictIn, after_verdict, apply_verdict
from worker.config import RunConfig
from worker.fleet.runtime import Runtime
from worker.states import SessionStatus
from worker.store import claims
from worker.store.tables import artifact_versions as _versions
from worker.store.tables import artifacts as _artifacts
from worker.store.tables import blobs as _blobs
from worker.store.tables import runs, sessions

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Handoff:
    """The artifact version a session handed off and waits on, with the rest of its files."""

    session_id: int
    round: int
    version_id: int
    main: str
    """The handed-off artifact's name."""
    content: str
    profile: str
    task_ref: str
    task_version: str
    task_sha256: str | None
    instance_id: str
    brief: dict[str, Any]
    """The instance's public fields."""
    epoch: int | None = None
    """The lease this worker holds to judge it (:func:`claim_handoff`); only its holder
    records the verdict."""
    record: bool = False
    """The run asks for a video of every artifact it verifies."""
    files: Mapping[str, str] = field(default_factory=dict)
    """Every live file of the session as handed off, the main one included."""


#: What a verdict reads of the run beside the handoff.
_RUN_COLUMNS = (
    runs.c.profile,
    runs.c.config,
    runs.c.task_ref,
    runs.c.task_version,
    runs.c.task_sha256,
)


def load_handoff(rt: Runtime, *, session_id: int, round_no: int) -> Handoff | None:
    """The version to verify, or None when the session no longer waits on this round."""
    s = sessions
    with rt.engine.connect() as conn:
        row = conn.execute(
            select(
                s.c.handoff_version_id,
                s.c.instance_id,
                s.c.brief,
                _blobs.c.content,
                _artifacts.c.name,
                *_RUN_COLUMNS,
            )
            .join(_versions, _versions.c.id == s.c.handoff_version_id)
            .join(_blobs, _blobs.c.sha256 == _versions.c.sha256)
            .join(_artifacts, _artifacts.c.id == _versions.c.artifact_id)
            .join(runs, runs.c.id == s.c.run_id)
            .where(
                s.c.id == session_id,
                s.c.status == SessionStatus.verifying.value,
                s.c.repair_round == round_no,
            )
        ).first()
        return None if row is None else _handoff(conn, row, session_id, round_no)


def _handoff(
    conn: Connection,
    row: Row[*tuple[Any, ...]],
    session_id: int,
    round_no: int,
    epoch: int | None = None,
) -> Handoff:
    return Handoff(
        session_id,
        round_no,
        row.handoff_version_id,
        row.name,
        row.content,
        row.profile,
        row.task_ref,
        row.task_version,
        row.task_sha256,
        row.instance_id,
        row.brief,
        epoch=epoch,
        record=RunConfig.model_validate(row.config).record,
        files={**handed_off_files(conn, session_id=session_id), row.name: row.content},
    )


def handed_off_files(conn: Connection, *, session_id: int) -> dict[str, str]:
    """A waiting session's live files, read through their versions (no turn runs while it
    waits, so the current versions are the ones it handed off)."""
    rows = conn.execute(
        select(_artifacts.c.name, _blobs.c.content)
        .join(
            _versions,
            (_versions.c.artifact_id == _artifacts.c.id)
            & (_versions.c.version == _artifacts.c.version),
        )
        .join(_blobs, _blobs.c.sha256 == _versions.c.sha256)
        .where(_artifacts.c.session_id == session_id, _artifacts.c.deleted_at.is_(None))
    ).all()
    return {r.name: r.content for r in rows}


_CLAIMED = claims.CLAIM_VERIFICATION.returning(
    sessions.c.handoff_version_id, sessions.c.run_id, sessions.c.instance_id, sessions.c.brief
).cte("claimed")
#: PostgreSQL: the claim and what was handed off, in one statement outside a transaction.
_CLAIM_HANDOFF_PG = (
    select(
        _CLAIMED.c.lease_epoch,
        _CLAIMED.c.handoff_version_id,
        _CLAIMED.c.instance_id,
        _CLAIMED.c.brief,
        _blobs.c.content,
        _artifacts.c.name,
    )
    .add_columns(*_RUN_COLUMNS)
    .join(_versions, _versions.c.id == _CLAIMED.c.handoff_version_id)
    .join(_blobs, _blobs.c.sha256 == _versions.c.sha256)
    .join(_artifacts, _artifacts.c.id == _versions.c.artifact_id)
    .join(runs, runs.c.id == _CLAIMED.c.run_id)
)


def claim_handoff(rt: Runtime, *, session_id: int, round_no: int) -> Handoff | None:
    """Take the session's lease to judge ``round_no``, and load what was handed off.

    Returns None when that verification is not due (recorded, or leased by a live worker).
    """
    if rt.engine.dialect.name == "postgresql":
        now = rt.clock()
        params = claims.lease_params(
            session_id=session_id,
            number=round_no,
            owner=rt.owner,
            now=now,
            expires_at=now + timedelta(seconds=rt.settings.lease_ttl_s),
        )
        with rt.engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            row = conn.execute(_CLAIM_HANDOFF_PG, params).first()
            if row is None:
                return None
            return _handoff(conn, row, session_id, round_no, row.lease_epoch)
    with rt.engine.begin() as conn:
        claim = claims.claim_verification(
            conn,
            session_id=session_id,
            round_no=round_no,
            owner=rt.owner,
            now=rt.clock(),
            ttl_s=rt.settings.lease_ttl_s,
        )
    if claim is None:
        return None
    handoff = load_handoff(rt, session_id=session_id, round_no=round_no)
    return replace(handoff, epoch=claim.epoch) if handoff is not None else None


def release_handoff(rt: Runtime, handoff: Handoff, *, retry_in_s: float) -> None:
    """Give the lease of an unjudged handoff back, so that a retry may claim it."""
    if handoff.epoch is None:
        return
    with rt.engine.begin() as conn:
        claims.release_verification(
            conn,
            session_id=handoff.session_id,
            epoch=handoff.epoch,
            retry_at=rt.clock() + timedelta(seconds=retry_in_s),
        )


def _waiting(*conditions: ColumnElement[bool]) -> Select[Any]:
    """The session waiting on a verdict, row-locked for the verdict's transaction."""
    s = sessions
    return (
        select(s.c.next_turn, s.c.run_id, runs.c.config)
        .join(runs, runs.c.id == s.c.run_id)
        .where(
            s.c.id == bindparam("b_session_id"),
            s.c.status == SessionStatus.verifying.value,
            s.c.repair_round == bindparam("b_round"),
            *conditions,
        )
        .with_for_update(of=s)
    )


# Every session's verdict runs these: built once.
_WAITING = _waiting()
_WAITING_LEASED = _waiting(sessions.c.lease_epoch == bindparam("b_epoch"))


def record_verdict(rt: Runtime, handoff: Handoff, verdict: VerdictIn) -> str:
    """Store the verdict and move the session on, exactly once per round.

    Returns what happened: ``succeeded``, ``repair``, ``failed`` or ``duplicate``.
    """
    now = rt.clock()
    with rt.engine.begin() as conn:
        row = conn.execute(
            _WAITING if handoff.epoch is None else _WAITING_LEASED,
            {
                "b_session_id": handoff.session_id,
                "b_round": handoff.round,
                "b_epoch": handoff.epoch,
            },
        ).first()
        if row is None:
            return "duplicate"
        applied = apply_verdict(
            conn,
            session_id=handoff.session_id,
            round_no=handoff.round,
            version_id=handoff.version_id,
            verdict=verdict,
            now=now,
            next_turn=row.next_turn,
            repair_rounds=RunConfig.model_validate(row.config).repair_rounds,
        )
    return after_verdict(rt, session_id=handoff.session_id, round_no=handoff.round, applied=applied)
