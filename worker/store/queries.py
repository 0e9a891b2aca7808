"""A run's state and figures, read from the database."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from worker.errors import RunNotFound
from worker.states import SessionStatus
from worker.store.tables import (
    artifact_versions,
    artifacts,
    events,
    runs,
    sessions,
    usage,
    verifications,
    waves,
)

_TOKEN_COLUMNS = {
    "prompt": "prompt_tokens",
    "cached": "cached_tokens",
    "output": "output_tokens",
    "thoughts": "thoughts_tokens",
    "tool_use": "tool_use_tokens",
}


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def run_status(conn: Connection, run_id: int) -> dict[str, Any]:
    """Everything ``scheduler status`` shows, as one JSON-ready dict.

    Raises:
        RunNotFound: no such run.
    """
    run = conn.execute(select(runs).where(runs.c.id == run_id)).first()
    if run is None:
        raise RunNotFound(f"no run {run_id}")
    counts: dict[str, int] = dict(
        conn.execute(
            select(sessions.c.status, func.count())
            .where(sessions.c.run_id == run_id)
            .group_by(sessions.c.status)
        ).all()
    )
    by_state = {s.value: int(counts.get(s.value, 0)) for s in SessionStatus}
    wave_rows = conn.execute(
        select(
            waves.c.index.label("wave_index"),
            waves.c.size,
            waves.c.status,
            waves.c.done_count,
            waves.c.started_at,
            waves.c.finished_at,
        )
        .where(waves.c.run_id == run_id)
        .order_by(waves.c.index)
    ).all()
    session_ids = select(sessions.c.id).where(sessions.c.run_id == run_id).scalar_subquery()
    versions = artifact_versions
    n_artifacts = conn.execute(
        select(func.count()).select_from(artifacts).where(artifacts.c.session_id.in_(session_ids))
    ).scalar_one()
    n_versions = conn.execute(
        select(func.count())
        .select_from(versions.join(artifacts))
        .where(artifacts.c.session_id.in_(session_ids))
    ).scalar_one()
    verified_by: dict[str, int] = dict(
        conn.execute(
            select(verifications.c.method, func.count())
            .where(verifications.c.session_id.in_(session_ids), verifications.c.passed)
            .group_by(verifications.c.method)
        ).all()
    )
    error_kind = func.coalesce(
        events.c.payload["kind"].as_string(), events.c.payload["reason"].as_string()
    )
    errors: dict[str, int] = dict(
        conn.execute(
            select(error_kind, func.count())
            .where(events.c.session_id.in_(session_ids), events.c.kind.in_(["tool_error", "nudge"]))
            .group_by(error_kind)
        ).all()
    )
    sums = conn.execute(
        select(
            func.count(),
            func.coalesce(func.sum(usage.c.cost_usd), 0.0),
            *[func.coalesce(func.sum(usage.c[c]), 0) for c in _TOKEN_COLUMNS.values()],
        ).where(usage.c.run_id == run_id)
    ).one()
    tokens = {name: int(v) for name, v in zip(_TOKEN_COLUMNS, sums[2:], strict=True)}
    tokens["total"] = tokens["prompt"] + tokens["output"] + tokens["thoughts"] + tokens["tool_use"]
    ended = sum(
        by_state[s.value]
        for s in SessionStatus
        if s.value not in ("pending", "running", "verifying")
    )
    return {
        "run": run.id,
        "status": run.status,
        "model": run.model,
        "profile": run.profile,
        "waves_spec": run.config.get("waves"),
        "ladder": run.ladder_id,
        "tier": run.tier,
        "stop_reason": run.stop_reason,
        "prefix_sha256": run.prefix_sha256,
        "created_at": _iso(run.created_at),
        "started_at": _iso(run.started_at),
        "finished_at": _iso(run.finished_at),
        "elapsed_s": (
            round((run.finished_at - run.started_at).total_seconds(), 3)
            if run.started_at and run.finished_at
            else None
        ),
        "sessions": {"total": sum(by_state.values()), "ended": ended, **by_state},
        "waves": [
            {
                "index": w.wave_index,
                "size": w.size,
                "status": w.status,
                "done": w.done_count,
                "started_at": _iso(w.started_at),
                "finished_at": _iso(w.finished_at),
            }
            for w in wave_rows
        ],
        "artifacts": {
            "total": int(n_artifacts),
            "versions": int(n_versions),
            "verified": sum(verified_by.values()),
            "verified_by": verified_by,
        },
        "tool_errors": {
            "total": int(sum(errors.values())),
            "by_kind": {str(k): int(v) for k, v in sorted(errors.items())},
        },
        "turns": int(sums[0]),
        "tokens": tokens,
        "cost_usd": round(float(sums[1]), 6),
    }


def latest_run_id(conn: Connection) -> int | None:
    """The id of the most recent run, if any."""
    value = conn.execute(select(func.max(runs.c.id))).scalar()
    return int(value) if value is not None else None


def session_rows(conn: Connection, run_id: int) -> list[dict[str, Any]]:
    """One line per session: where it stands, what it took and what it cost."""
    cost = (
        select(
            usage.c.session_id,
            func.count().label("turns"),
            func.sum(usage.c.cost_usd).label("cost"),
        )
        .where(usage.c.run_id == run_id)
        .group_by(usage.c.session_id)
        .subquery()
    )
    versions = (
        select(artifacts.c.session_id, func.count(artifact_versions.c.id).label("n"))
        .join(artifact_versions)
        .group_by(artifacts.c.session_id)
        .subquery()
    )
    errors = (
        select(events.c.session_id, func.count().label("n"))
        .where(events.c.kind.in_(["tool_error", "nudge"]))
        .group_by(events.c.session_id)
        .subquery()
    )
    rows = conn.execute(
        select(
            sessions.c.id,
            sessions.c.index.label("session_index"),
            waves.c.index.label("wave_index"),
            sessions.c.persona,
            sessions.c.status,
            sessions.c.outcome,
            sessions.c.repair_round,
            sessions.c.error,
            func.coalesce(cost.c.turns, 0).label("turns"),
            func.coalesce(cost.c.cost, 0.0).label("cost"),
            func.coalesce(versions.c.n, 0).label("versions"),
            func.coalesce(errors.c.n, 0).label("errors"),
        )
        .join(waves, waves.c.id == sessions.c.wave_id)
        .outerjoin(cost, cost.c.session_id == sessions.c.id)
        .outerjoin(versions, versions.c.session_id == sessions.c.id)
        .outerjoin(errors, errors.c.session_id == sessions.c.id)
        .where(sessions.c.run_id == run_id)
        .order_by(sessions.c.index)
    ).all()
    return [
        {
            "id": r.id,
            "index": r.session_index,
            "wave": r.wave_index,
            "persona": r.persona,
            "status": r.status,
            "outcome": r.outcome,
            "turns": int(r.turns),
            "versions": int(r.versions),
            "errors": int(r.errors),
            "repair_rounds": r.repair_round,
            "cost_usd": round(float(r.cost), 6),
            "error": r.error,
        }
        for r in rows
    ]
