"""Waves: the outbox row that starts a wave, the start itself, and the run after it.

A wave starts once, from its outbox row, whoever takes the row; a run's budget forecast may
stop the run before it (:func:`stop_by_forecast`); a ladder's finished run starts the next.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.engine import Connection

from worker.states import Outcome, RunStatus, SessionStatus, WaveStatus
from worker.store.due import Dispatch
from worker.store.engine import notify_run
from worker.store.forecast import forecast
from worker.store.tables import ladders, outbox, runs, sessions, waves
from worker.store.warmup import hold_wave

__all__ = [
    "START_WAVE",
    "next_in_ladder",
    "start_wave",
    "stop_by_forecast",
    "take_outbox",
    "wave_start",
]

logger = logging.getLogger(__name__)


#: Outbox kind that starts the next wave of a run.
START_WAVE = "start_wave"


def wave_start(run_id: int, index: int, now: datetime) -> dict[str, Any]:
    """The outbox row that starts wave ``index`` of a run (its key makes it unique)."""
    return {
        "key": f"run:{run_id}:wave:{index}",
        "run_id": run_id,
        "kind": START_WAVE,
        "payload": {"index": index},
        "created_at": now,
    }


def next_in_ladder(conn: Connection, *, run_id: int, now: datetime) -> None:
    # A ladder's runs go one after the other: the finished run starts the next pending one,
    # or closes the ladder when it was the last.
    ladder_id = conn.execute(select(runs.c.ladder_id).where(runs.c.id == run_id)).scalar()
    if ladder_id is None:
        return
    nxt = conn.execute(
        select(runs.c.id)
        .where(
            runs.c.ladder_id == ladder_id,
            runs.c.status == RunStatus.pending.value,
            runs.c.id > run_id,
        )
        .order_by(runs.c.id)
        .limit(1)
    ).scalar()
    if nxt is not None:
        conn.execute(insert(outbox).values(wave_start(nxt, 1, now)))
        notify_run(conn, nxt)
    else:
        conn.execute(
            update(ladders)
            .where(ladders.c.id == ladder_id)
            .values(status=RunStatus.finished.value, finished_at=now)
        )


def start_wave(conn: Connection, *, run_id: int, index: int, now: datetime) -> list[Dispatch]:
    """Start wave ``index`` of a run once; returns the first turns to dispatch.

    With a budget, a wave after the first starts only if the run's forecast says its
    sessions can be paid; otherwise the run stops there (:func:`stop_by_forecast`).
    """
    if index > 1 and stop_by_forecast(conn, run_id=run_id, now=now):
        return []
    wave = conn.execute(
        update(waves)
        .where(
            waves.c.run_id == run_id,
            waves.c.index == index,
            waves.c.status == WaveStatus.pending.value,
        )
        .values(status=WaveStatus.running.value, started_at=now)
        .returning(waves.c.id)
    ).first()
    if wave is None:
        return []
    conn.execute(
        update(runs)
        .where(runs.c.id == run_id, runs.c.status == RunStatus.pending.value)
        .values(status=RunStatus.running.value, started_at=now)
    )
    started = conn.execute(
        update(sessions)
        .where(sessions.c.wave_id == wave.id, sessions.c.status == SessionStatus.pending.value)
        .values(status=SessionStatus.running.value, started_at=now, dispatched_at=now)
        .returning(sessions.c.id, sessions.c.next_turn)
    ).all()
    notify_run(conn, run_id)
    started = sorted(started)
    delay_s = hold_wave(conn, run_id=run_id, session_ids=[r.id for r in started], now=now)
    return [
        Dispatch(r.id, "turn", r.next_turn, delay_s if i else 0.0) for i, r in enumerate(started)
    ]


def stop_by_forecast(conn: Connection, *, run_id: int, now: datetime) -> bool:
    """Stop a running run whose budget forecast's upper bound passes its budget.

    Its sessions that have not started end ``stopped`` (outcome ``forecast``), their waves
    close, and the run ends ``stopped`` with the forecast as its reason. Returns True when
    it stopped the run.
    """
    run = conn.execute(
        select(runs.c.status, runs.c.budget_usd, runs.c.config)
        .where(runs.c.id == run_id)
        .with_for_update()
    ).one()
    if (
        run.budget_usd is None
        or run.status != RunStatus.running.value
        or run.config.get("forecast", "on") != "on"
    ):
        return False
    projected = forecast(conn, run_id=run_id)
    if projected is None or not projected.over_budget:
        return False
    reason = f"forecast: {projected.describe()}"
    conn.execute(
        update(sessions)
        .where(sessions.c.run_id == run_id, sessions.c.status == SessionStatus.pending.value)
        .values(
            status=Outcome.forecast.status.value,
            outcome=Outcome.forecast.value,
            error=reason,
            finished_at=now,
            # Their waves are closed here, full: nothing is left to count.
            counted=True,
        )
    )
    conn.execute(
        update(waves)
        .where(waves.c.run_id == run_id, waves.c.status == WaveStatus.pending.value)
        .values(status=WaveStatus.finished.value, done_count=waves.c.size, finished_at=now)
    )
    conn.execute(
        update(runs)
        .where(runs.c.id == run_id)
        .values(status=RunStatus.stopped.value, stop_reason=reason, finished_at=now)
    )
    logger.warning("run %s stopped before its next wave: %s", run_id, reason)
    next_in_ladder(conn, run_id=run_id, now=now)
    notify_run(conn, run_id)
    return True


def take_outbox(
    conn: Connection,
    *,
    now: datetime,
    older_than: datetime | None = None,
    run_id: int | None = None,
) -> list[Dispatch]:
    """Process undispatched outbox rows: mark each dispatched and start its wave."""
    query = select(outbox.c.id, outbox.c.run_id, outbox.c.kind, outbox.c.payload).where(
        outbox.c.dispatched_at.is_(None)
    )
    if older_than is not None:
        query = query.where(outbox.c.created_at < older_than)
    if run_id is not None:
        query = query.where(outbox.c.run_id == run_id)
    dispatches: list[Dispatch] = []
    for row in conn.execute(query.order_by(outbox.c.id)).all():
        taken = conn.execute(
            update(outbox)
            .where(outbox.c.id == row.id, outbox.c.dispatched_at.is_(None))
            .values(dispatched_at=now)
        )
        if taken.rowcount != 1:
            continue
        if row.kind == START_WAVE:
            dispatches += start_wave(conn, run_id=row.run_id, index=row.payload["index"], now=now)
    return dispatches
