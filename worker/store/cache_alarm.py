"""The cache-share alarm: a run whose share of cached prompt tokens falls well below its own.

A run's cache share is steady while its prefix is deterministic: every turn after the
first of a session is served most of its prompt from cache. When the share of the last
:data:`WINDOW` turns falls below :data:`DROP_RATIO` of the run's running share before
them, something changed under the run: a prefix that stopped being byte-identical, a
model behind the name that changed, a cache the provider dropped. The alarm names the
first turn of that window below the threshold, where the fall started.

The worker checks after every turn it commits and logs the alarm at WARNING once, on the
turn that raises it; ``status``, ``--follow`` and the report read the same figure.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import select
from sqlalchemy.engine import Connection

from worker.store.tables import sessions, usage

__all__ = ["CacheAlarm", "UsageRow", "after_turn", "cache_alarm", "find_drop"]

logger = logging.getLogger(__name__)

#: Turns whose share is compared with the running share before them.
WINDOW = 8
#: Turns the run must have had before the window for its running share to count.
MIN_HISTORY = 16
#: The alarm rises when the window's share is below this fraction of the running share.
DROP_RATIO = 0.5
#: A running share below this is no steady figure to fall from.
MIN_SHARE = 0.2


class UsageRow(NamedTuple):
    """One model call of a run, in commit order."""

    session_index: int
    turn_no: int
    prompt_tokens: int
    cached_tokens: int
    at: datetime


@dataclass(frozen=True)
class CacheAlarm:
    """Where a run's cache share fell, and from what to what."""

    turn: int
    """The run's turn (1-based, in commit order) where the fall started."""
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
            f"cache share fell to {self.window_share:.0%} over {WINDOW} turns from a running "
            f"{self.running_share:.0%}, starting at turn {self.turn} (session "
            f"{self.session_index}, turn {self.turn_no})"
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
    return [
        UsageRow(*row)
        for row in conn.execute(
            select(
                sessions.c.index,
                usage.c.turn_no,
                usage.c.prompt_tokens,
                usage.c.cached_tokens,
                usage.c.created_at,
            )
            .join(sessions, sessions.c.id == usage.c.session_id)
            .where(usage.c.run_id == run_id)
            .order_by(usage.c.id)
        ).all()
    ]


def cache_alarm(conn: Connection, *, run_id: int) -> CacheAlarm | None:
    """The run's cache-share alarm, if its share fell."""
    return find_drop(_rows(conn, run_id))


def after_turn(conn: Connection, *, run_id: int) -> CacheAlarm | None:
    """Check a run after a turn committed; log the alarm at WARNING on the turn it rises.

    Returns the alarm when this turn raised it.
    """
    rows = _rows(conn, run_id)
    alarm = find_drop(rows)
    if alarm is None or alarm.raised_at_turn != len(rows):
        return None
    logger.warning("run %s: %s", run_id, alarm.describe())
    return alarm
