"""What following a run reads: whether it ended, what its workers claimed, who is alive."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import NamedTuple

from sqlalchemy import Engine, case, func, select
from sqlalchemy.engine import Connection

from worker.states import TERMINAL, RunStatus, SessionStatus
from worker.store.claims import lease_free
from worker.store.engine import utcnow
from worker.store.tables import runs, samples, sessions

__all__ = ["FINAL_RUN_STATES", "Claims", "claims_of", "live_roles", "run_ended"]

#: Run states after which nothing more happens.
FINAL_RUN_STATES = frozenset({RunStatus.finished, RunStatus.cancelled, RunStatus.stopped})


def run_ended(conn: Connection, run_id: int) -> bool:
    """Whether the run is over: in a final state, with its last turns in flight ended."""
    row = conn.execute(select(runs.c.status, runs.c.finished_at).where(runs.c.id == run_id)).one()
    return RunStatus(row.status) in FINAL_RUN_STATES and row.finished_at is not None


class Claims(NamedTuple):
    """What a run's workers have taken so far, and what waits for one."""

    progress: tuple[int, ...]
    """Changes whenever a worker claims or ends work of the run."""
    turns_waiting: int
    """Sessions with a turn due that no worker holds."""
    verdicts_waiting: int
    """Sessions waiting for a verdict that no worker holds."""


def claims_of(conn: Connection, run_id: int, *, now: datetime) -> Claims:
    """What the run's workers have claimed so far, and what waits for one."""
    s = sessions.c
    unheld = lease_free(now)
    row = conn.execute(
        select(
            func.coalesce(func.sum(s.lease_epoch), 0),
            func.coalesce(func.sum(s.next_turn), 0),
            func.count(case((s.status.in_([t.value for t in TERMINAL]), 1))),
            func.count(case((s.status == SessionStatus.verifying.value, 1))),
            func.count(case(((s.status == SessionStatus.running.value) & unheld, 1))),
            func.count(case(((s.status == SessionStatus.verifying.value) & unheld, 1))),
        ).where(s.run_id == run_id)
    ).one()
    return Claims(tuple(int(v) for v in row[:4]), int(row[4]), int(row[5]))


def live_roles(engine: Engine, *, recent_s: float) -> frozenset[str]:
    """Roles of the worker processes that sampled themselves lately (idle or not)."""
    # Every worker process samples itself every fraction of a second and writes at least
    # every few seconds, so a recent sample means it lives.
    since = utcnow() - timedelta(seconds=recent_s)
    with engine.connect() as conn:
        roles = conn.execute(select(samples.c.role).where(samples.c.at > since).distinct())
        return frozenset(roles.scalars())
