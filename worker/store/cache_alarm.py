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
few passes) on each pass, not each turn, and reads only the calls committed since its last
pass (:class:`CacheWatch`): a check that read all of a run's calls each time would cost a
large run quadratic time. The first reconciler that sees the fall
logs it at WARNING (claimed by an outbox key, so once per run). ``status``, ``--follow``
and the report read the same figure.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple

from sqlalchemy import func, insert, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from worker.states import RunStatus
from worker.store.tables import outbox, runs, sessions, usage

__all__ = [
    "CacheAlarm",
    "CacheWatch",
    "UsageRow",
    "cache_alarm",
    "check_run",
    "find_drop",
    "watch",
]

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


class _Scan:
    """The search for a run's first fall, fed one call at a time in commit order.

    It keeps the sums of the calls before the window and the window itself, so each call
    costs the same however long the run has been going.
    """

    def __init__(self) -> None:
        self.count = 0
        """Calls fed so far."""
        self.window: deque[UsageRow] = deque(maxlen=WINDOW)
        self.prompt = 0
        """Prompt tokens already sent, over the calls before the window."""
        self.cached = 0
        """Cached tokens over the calls before the window."""
        self.alarm: CacheAlarm | None = None
        """The first fall, once found; nothing more is looked at after it."""

    def feed(self, row: UsageRow) -> CacheAlarm | None:
        """Add the run's next call; returns the alarm when this call completes its window."""
        if self.alarm is not None:
            return None
        if len(self.window) == WINDOW:
            leaving = self.window[0]
            self.prompt += leaving.prompt_tokens
            self.cached += leaving.cached_tokens
        self.window.append(row)
        self.count += 1
        before = self.count - WINDOW
        if before < MIN_HISTORY or not self.prompt:
            return None
        running = self.cached / self.prompt
        share = _share(self.window)
        if running < MIN_SHARE or share >= DROP_RATIO * running:
            return None
        threshold = DROP_RATIO * running
        first, start = next(
            (i, r)
            for i, r in enumerate(self.window)
            if r.prompt_tokens == 0 or r.cached_tokens / r.prompt_tokens < threshold
        )
        self.alarm = CacheAlarm(
            turn=before + first + 1,
            session_index=start.session_index,
            turn_no=start.turn_no,
            at=start.at,
            running_share=running,
            window_share=share,
            raised_at_turn=self.count,
        )
        return self.alarm


def find_drop(rows: Sequence[UsageRow]) -> CacheAlarm | None:
    """The first fall of the cache share in a run's turns, or None."""
    scan = _Scan()
    for row in rows:
        if (alarm := scan.feed(row)) is not None:
            return alarm
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


def _going(conn: Connection, *, ended_since: datetime) -> list[int]:
    """The runs still going or ended since ``ended_since`` whose alarm is not logged."""
    logged = select(outbox.c.run_id).where(outbox.c.kind == ALARM)
    return list(
        conn.execute(
            select(runs.c.id).where(
                (runs.c.status == RunStatus.running.value) | (runs.c.finished_at >= ended_since),
                runs.c.id.not_in(logged),
            )
        ).scalars()
    )


def watch(conn: Connection, *, now: datetime, ended_since: datetime) -> list[CacheAlarm]:
    """Check every run still going or ended since ``ended_since`` whose alarm is not logged,
    reading each whole (a reconciler keeps a :class:`CacheWatch` instead).

    Returns the alarms this call logged.
    """
    going = _going(conn, ended_since=ended_since)
    return [alarm for run_id in going if (alarm := check_run(conn, run_id=run_id, now=now))]


#: Seconds a call's row is left to settle before a watch reads it: ids are handed out as
#: rows are inserted, and the turns commit a moment later, not always in that order.
SETTLE_S = 5.0


@dataclass
class _Watched:
    """How far a watch has read a run's calls."""

    scan: _Scan = field(default_factory=_Scan)
    last_id: int = 0
    """The last call read, by id."""
    read: int = 0
    """Calls read, first turns of sessions included."""
    sent: dict[int, int] = field(default_factory=dict)
    """Each session's prompt tokens on its last call read."""


class CacheWatch:
    """Watches the runs going on, reading each run's calls once.

    A reconciler's pass reads only the calls committed since its previous pass, a few
    seconds old (:data:`SETTLE_S`), and feeds them in commit order to the run's search:
    a pass costs what was committed since, not the length of the run. A call that commits
    later than that, below what was read (a turn whose commit took longer than
    :data:`SETTLE_S`), is noticed by the run's count of calls, and the run is read again
    from its start.
    """

    def __init__(self) -> None:
        self.runs: dict[int, _Watched] = {}

    def watch(self, conn: Connection, *, now: datetime, ended_since: datetime) -> list[CacheAlarm]:
        """Read what the runs going on committed since the last pass; log what fell.

        Returns the alarms this call logged.
        """
        going = _going(conn, ended_since=ended_since)
        self.runs = {run_id: self.runs.get(run_id) or _Watched() for run_id in going}
        settled = now - timedelta(seconds=SETTLE_S)
        alarms = []
        for run_id in list(self.runs):
            found = self._read(conn, run_id, self.runs[run_id], settled)
            if (alarm := _log_once(conn, run_id=run_id, alarm=found, now=now)) is not None:
                alarms.append(alarm)
        return alarms

    def _read(
        self, conn: Connection, run_id: int, watched: _Watched, settled: datetime
    ) -> CacheAlarm | None:
        if watched.scan.alarm is not None:
            return watched.scan.alarm
        total = conn.execute(
            select(func.count()).select_from(usage).where(usage.c.run_id == run_id)
        ).scalar_one()
        rows = conn.execute(
            select(
                usage.c.id,
                usage.c.session_id,
                sessions.c.index.label("session_index"),
                usage.c.turn_no,
                usage.c.prompt_tokens,
                usage.c.cached_tokens,
                usage.c.created_at,
            )
            .join(sessions, sessions.c.id == usage.c.session_id)
            .where(usage.c.run_id == run_id, usage.c.id > watched.last_id)
            .order_by(usage.c.id)
        ).all()
        if total > watched.read + len(rows):
            # A call committed late, below what was read: read the run again.
            watched = self.runs[run_id] = _Watched()
            return self._read(conn, run_id, watched, settled)
        for row in rows:
            if row.created_at >= settled:
                break  # this one and those after it are read next pass
            watched.last_id, watched.read = row.id, watched.read + 1
            sent_before = watched.sent.get(row.session_id)
            watched.sent[row.session_id] = row.prompt_tokens
            if sent_before is None:
                continue  # a session's first call: it had sent nothing before
            call = UsageRow(
                row.session_index, row.turn_no, sent_before, row.cached_tokens, row.created_at
            )
            if watched.scan.feed(call) is not None:
                return watched.scan.alarm
        return None


def check_run(conn: Connection, *, run_id: int, now: datetime) -> CacheAlarm | None:
    """Check a run; log the alarm at WARNING the first time it is seen.

    Returns the alarm when this call logged it.
    """
    if _logged(conn, run_id=run_id):
        return None
    return _log_once(conn, run_id=run_id, alarm=find_drop(_rows(conn, run_id)), now=now)


def _key(run_id: int) -> str:
    return f"run:{run_id}:cache_alarm"


def _logged(conn: Connection, *, run_id: int) -> bool:
    return conn.execute(select(outbox.c.id).where(outbox.c.key == _key(run_id))).first() is not None


def _log_once(
    conn: Connection, *, run_id: int, alarm: CacheAlarm | None, now: datetime
) -> CacheAlarm | None:
    """Log ``alarm`` at WARNING unless a worker already did; returns it if this call did."""
    if alarm is None:
        return None
    try:
        # Written as dispatched: the row is a once-per-run mark, not work to send.
        with conn.begin_nested():
            conn.execute(
                insert(outbox).values(
                    key=_key(run_id),
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
