"""Watching a run from the database while faults are injected into it.

Unlike :func:`scheduler.cli.follow.until_finished`, these helpers poll with short-lived
connections and ride out a database that is restarting, and let the caller act on every
tick (a supervisor restarting dead workers, say).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sqlalchemy import Engine, func, select
from sqlalchemy.exc import OperationalError

from worker.store.claims import lease_free
from worker.store.tables import runs, sessions, usage

#: Seconds between two looks at the database.
POLL_S = 0.1


def turns_committed(engine: Engine, run_id: int) -> int:
    """Usage rows of the run: one per committed turn."""
    with engine.connect() as conn:
        return int(
            conn.execute(
                select(func.count()).select_from(usage).where(usage.c.run_id == run_id)
            ).scalar_one()
        )


def turns_in_flight(engine: Engine, run_id: int) -> int:
    """Running sessions whose turn is claimed by a live lease right now."""
    s = sessions
    with engine.connect() as conn:
        return int(
            conn.execute(
                select(func.count()).where(
                    s.c.run_id == run_id,
                    s.c.status == "running",
                    s.c.lease_owner.is_not(None),
                    ~lease_free(func.now()),
                )
            ).scalar_one()
        )


def wait_until(what: str, check: Callable[[], bool], timeout_s: float) -> None:
    """Poll ``check`` until it holds.

    Raises:
        TimeoutError: it did not hold within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout_s:g}s")
        time.sleep(POLL_S)


def wait_for_run(
    engine: Engine, run_id: int, timeout_s: float, tick: Callable[[], None] | None = None
) -> str:
    """Wait until the run is over (finished, or cancelled with nothing in flight).

    Database errors count as "not yet": the database may be restarting. ``tick`` runs on
    every poll. Returns the run's final status.

    Raises:
        TimeoutError: the run was not over within ``timeout_s``.
    """
    status: list[str] = []

    def over() -> bool:
        if tick is not None:
            tick()
        try:
            with engine.connect() as conn:
                row = conn.execute(
                    select(runs.c.status, runs.c.finished_at).where(runs.c.id == run_id)
                ).one()
        except OperationalError:
            return False
        status[:] = [row.status]
        return row.status in ("finished", "cancelled") and row.finished_at is not None

    wait_until(f"the end of run {run_id}", over, timeout_s)
    return status[0]


#: Where a session stands: its status, its next turn and its repair round.
Position = tuple[str, int, int]


def session_positions(engine: Engine, run_id: int) -> dict[int, Position]:
    """Where each session of the run stands now, by id: a fault's victims are those that
    have not moved on since."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(
                sessions.c.id, sessions.c.status, sessions.c.next_turn, sessions.c.repair_round
            ).where(sessions.c.run_id == run_id)
        ).all()
    return {r.id: (r.status, r.next_turn, r.repair_round) for r in rows}


def held_by(engine: Engine, run_id: int, owner: str) -> list[int]:
    """The run's sessions whose lease ``owner`` holds."""
    with engine.connect() as conn:
        return list(
            conn.execute(
                select(sessions.c.id).where(
                    sessions.c.run_id == run_id, sessions.c.lease_owner == owner
                )
            ).scalars()
        )


def outcome_counts(engine: Engine, run_id: int) -> dict[str | None, int]:
    """How many of the run's sessions ended with each outcome (None: not ended)."""
    with engine.connect() as conn:
        return dict(
            conn.execute(
                select(sessions.c.outcome, func.count())
                .where(sessions.c.run_id == run_id)
                .group_by(sessions.c.outcome)
            ).all()
        )
