"""The cache-share alarm: a run whose cache serves far less than its own running figure.

The figure watched is the share of the prompt a session already sent that the cache
serves back: a turn's cached tokens over the prompt tokens of that session's previous turn.
While the prefix is deterministic and the model the same, that share is steady (all of it,
at the fake API), whatever the turn adds: a turn whose prompt is mostly a new artifact
still finds everything sent before cached. The plain cache share would dip there, every
wave, at the same turn of every session. First turns are left out: they sent nothing before.

When the share over the last :data:`WINDOW` turns falls below :data:`DROP_RATIO` of the
run's running share before them, something changed under the run: a prefix that stopped
being byte-identical, a model behind the name that changed, a cache the provider dropped.
The alarm names the first turn of that window below the threshold, where the fall started.

Every worker's reconciler checks the runs still going (and those that ended in the last
few passes) on each pass, not each turn: a run's check reads all its calls, which after
every turn would cost a large run quadratic time. The first reconciler that sees the fall
logs it at WARNING (claimed by an outbox key, so once per run). ``status``, ``--follow``
and the report read the same figure.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import func, insert, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from worker.states import RunStatus
from worker.store.tables import outbox, runs, sessions, usage

__all__ = ["CacheAlarm", "UsageRow", "cache_alarm", "check_run", "find_drop", "watch"]

logger = logging.getLogger(__name__)

#: Turns whose share is compared with the running share before them.
WINDOW = 8
#: Turns the run must have had before the window for its running share to count.
MIN_HISTORY = 16
#: The alarm rises when the window's share is below this fraction of the running share.
DROP_RATIO = 0.5
#: A running share below this is no steady figure to fall from.
MIN_SHARE = 0.2
#: Outbox kind of the mark that the run's alarm was logged.
ALARM = "cache_alarm"


class UsageRow(NamedTuple):
    """One model call of a run after a session's first, in commit order."""

    session_index: int
    turn_no: int
    prompt_tokens: int
    """Prompt tokens of the session's previous call: what it had sent before."""
    cached_tokens: int
    """Tokens of this call served from cache."""
    at: datetime


@dataclass(frozen=True)
class CacheAlarm:
    """Where a run's cache share fell, and from what to what."""

    turn: int
    """The run's turn (1-based, in commit order, first turns of sessions left out) where
    the fall started."""
    session_index: int
    turn_no: int
    at: datetime
    running_share: float
    """The run's share over every turn before the window."""
    window_share: float
    """The share over the window that raised the alarm."""
    raised_at_turn: int
    """The run's turn that completed the window."""

    def describe(self) -> str:
        """One line for ``status`` and the report."""
        return (
            f"cache share fell to {self.window_share:.0%} of the prompt already sent over "
            f"{WINDOW} turns, from a running {self.running_share:.0%}, starting at turn "
            f"{self.turn} (session {self.session_index}, turn {self.turn_no})"
        )


def _share(rows: Sequence[UsageRow]) -> float:
    prompt = sum(r.prompt_tokens for r in rows)
    return sum(r.cached_tokens for r in rows) / prompt if prompt else 0.0


def find_drop(rows: Sequence[UsageRow]) -> CacheAlarm | None:
    """The first fall of the cache share in a run's turns, or None."""
    prompt = cached = 0
    for end in range(WINDOW, len(rows) + 1):
        before = rows[: end - WINDOW]
        if end > WINDOW:
            prompt += before[-1].prompt_tokens
            cached += before[-1].cached_tokens
        if len(before) < MIN_HISTORY or not prompt:
            continue
        running = cached / prompt
        window = rows[end - WINDOW : end]
        share = _share(window)
        if running < MIN_SHARE or share >= DROP_RATIO * running:
            continue
        threshold = DROP_RATIO * running
        first = next(
            i
            for i, r in enumerate(window)
            if r.prompt_tokens == 0 or r.cached_tokens / r.prompt_tokens < threshold
        )
        start = window[first]
        return CacheAlarm(
            turn=end - WINDOW + first + 1,
            session_index=start.session_index,
            turn_no=start.turn_no,
            at=start.at,
            running_share=running,
            window_share=share,
            raised_at_turn=end,
        )
    return None


def _rows(conn: Connection, run_id: int) -> list[UsageRow]:
    sent_before = func.lag(usage.c.prompt_tokens).over(
        partition_by=usage.c.session_id, order_by=usage.c.turn_no
    )
    calls = (
        select(
            usage.c.id,
            sessions.c.index,
            usage.c.turn_no,
            sent_before.label("sent_before"),
            usage.c.cached_tokens,
            usage.c.created_at,
        )
        .join(sessions, sessions.c.id == usage.c.session_id)
        .where(usage.c.run_id == run_id)
        .subquery()
    )
    rows = conn.execute(
        select(
            calls.c.index,
            calls.c.turn_no,
            calls.c.sent_before,
            calls.c.cached_tokens,
            calls.c.created_at,
        )
        .where(calls.c.sent_before.is_not(None))
        .order_by(calls.c.id)
    ).all()
    return [UsageRow(*row) for row in rows]


def cache_alarm(conn: Connection, *, run_id: int) -> CacheAlarm | None:
    """The run's cache-share alarm, if its share fell."""
    return find_drop(_rows(conn, run_id))


def watch(conn: Connection, *, now: datetime, ended_since: datetime) -> list[CacheAlarm]:
    """Check every run still going or ended since ``ended_since`` whose alarm is not logged.

    Returns the alarms this call logged.
    """
    logged = select(outbox.c.run_id).where(outbox.c.kind == ALARM)
    run_ids = conn.execute(
        select(runs.c.id).where(
            (runs.c.status == RunStatus.running.value) | (runs.c.finished_at >= ended_since),
            runs.c.id.not_in(logged),
        )
    ).scalars()
    return [alarm for run_id in run_ids if (alarm := check_run(conn, run_id=run_id, now=now))]


def check_run(conn: Connection, *, run_id: int, now: datetime) -> CacheAlarm | None:
    """Check a run; log the alarm at WARNING the first time it is seen.

    Returns the alarm when this call logged it.
    """
    key = f"run:{run_id}:cache_alarm"
    if conn.execute(select(outbox.c.id).where(outbox.c.key == key)).first() is not None:
        return None
    alarm = find_drop(_rows(conn, run_id))
    if alarm is None:
        return None
    try:
        # Written as dispatched: the row is a once-per-run mark, not work to send.
        with conn.begin_nested():
            conn.execute(
                insert(outbox).values(
                    key=key,
                    run_id=run_id,
                    kind=ALARM,
                    payload={"turn": alarm.turn},
                    created_at=now,
                    dispatched_at=now,
                )
            )
    except IntegrityError:  # another worker saw it first and logged it
        return None
    logger.warning("run %s: %s", run_id, alarm.describe())
    return alarm
