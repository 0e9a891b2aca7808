"""What the broker holds: the task ids still queued, and those reserved by a worker.

The reconciler asks before it sends a due turn again: a message still waiting in a busy
queue is not lost, and sending it again only makes a duplicate that the fleet must then
consume and skip. kombu's Redis transport keeps a queue as a list (one per priority step),
and the messages workers hold unacknowledged in the ``unacked`` hash, with the time each
was delivered in the ``unacked_index`` sorted set; every key under the fleet's prefix.
Which worker holds which message is not recorded, so every worker also beats in a hash of
the fleet's workers: while none has fallen silent, a reserved message is waiting for a
live worker, however long a saturated worker takes to start it.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import psutil
import redis

from worker.fleet.identity import this_host

logger = logging.getLogger(__name__)

#: The id of a turn or verify task in a message's headers (Celery's message protocol 2).
_TASK_ID = re.compile(rb'"id": ?"((?:turn|verify):\d+:\d+)"')
#: kombu's separator between a queue's name and its priority step.
_PRIORITY_SEP = "\x06\x16"
#: kombu's default priority steps: a queue is up to four lists.
_PRIORITY_STEPS = (0, 3, 6, 9)
#: Seconds after which a silent worker is forgotten (the transport's visibility timeout).
FORGET_AFTER_S = 3600.0


@dataclass(frozen=True)
class BrokerView:
    """Task ids on the broker at one moment."""

    queued: frozenset[str]
    """Waiting in a queue, not yet delivered to any worker."""
    reserved: dict[str, float]
    """Delivered to a worker and not acknowledged: task id to the time (epoch seconds) it
    was delivered."""
    silent_workers: int = 0
    """Workers of the fleet that stopped reporting without signing off (presumed dead):
    the messages they reserved stay unacknowledged until kombu's visibility timeout."""
    dead_by: float | None = None
    """Epoch seconds by which the last of the silent workers had died (its last heartbeat
    plus one beat): a message reserved later cannot be one of theirs. None: none is silent."""
    send_lag_s: float = 0.0
    """How long the slowest live worker's sends take now (its last report): a message due
    more recently than that may still be on its way to the broker."""


class BrokerProbe(Protocol):
    """Reads which task ids the broker holds, and which workers of the fleet are alive."""

    def view(self) -> BrokerView | None:
        """What the broker holds now, or None when it cannot tell (unreachable, or a
        broker that cannot be read)."""
        ...

    def heartbeat(self, round_trip_ms: float | None = None, send_lag_s: float = 0.0) -> None:
        """Report this worker alive (once per reconciler pass), with how long a round trip
        to its database took, if measured, and how long its sends take now."""
        ...

    def round_trips(self) -> list[float]:
        """The round trips (ms) the other live workers of the fleet reported last."""
        ...

    def queued(self) -> int | None:
        """How many messages wait in the queues, or None when it cannot tell."""
        ...

    def sign_off(self) -> None:
        """Report this worker stopped on purpose (its reserved messages went back)."""
        ...

    def twin(self) -> BrokerProbe:
        """The same probe on connections of its own, for another thread to use."""
        ...


class RedisBrokerProbe:
    """A :class:`BrokerProbe` of kombu's Redis transport.

    Args:
        url: The broker's Redis URL.
        prefix: The fleet's key prefix (``global_keyprefix``), or "".
        queues: The queues whose messages count.
        owner: This worker process (``host:pid``), for the fleet's heartbeats.
        silence_s: A worker whose last heartbeat is older than this is presumed dead; one
            of this host whose process is gone is dead at once.
        beat_s: Seconds between two heartbeats of a live worker.
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str,
        queues: Sequence[str],
        owner: str = "",
        silence_s: float = 30.0,
        beat_s: float = 5.0,
    ) -> None:
        self.client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        self.url = url
        self.queues = list(queues)
        self.prefix = prefix
        self.owner = owner
        self.silence_s = silence_s
        self.beat_s = beat_s
        self.host = this_host()
        self.workers_key = f"{prefix}workers"
        self.round_trips_key = f"{prefix}round_trips"
        self.send_lags_key = f"{prefix}send_lags"
        self.lists = [
            f"{prefix}{q}{_PRIORITY_SEP}{p}" if p else f"{prefix}{q}"
            for q in queues
            for p in _PRIORITY_STEPS
        ]

    def view(self) -> BrokerView | None:
        """Read the queues, then the reserved messages (a message moves that way)."""
        try:
            pipe = self.client.pipeline(transaction=False)
            for key in self.lists:
                pipe.lrange(key, 0, -1)
            pipe.hgetall(f"{self.prefix}unacked")
            pipe.zrange(f"{self.prefix}unacked_index", 0, -1, withscores=True)
            pipe.hgetall(self.workers_key)
            pipe.hgetall(self.send_lags_key)
            *lists, unacked, index, beats, lags = pipe.execute()
        except redis.RedisError:
            logger.warning("could not read the broker's queues", exc_info=True)
            return None
        queued = frozenset(_ids(m for messages in lists for m in messages))
        delivered = {tag: float(at) for tag, at in index}
        reserved: dict[str, float] = {}
        for tag, payload in unacked.items():
            for task_id in _ids([payload]):
                reserved[task_id] = delivered.get(tag, 0.0)
        silent, dead_by = self._silent(beats)
        return BrokerView(queued, reserved, silent, dead_by, self._send_lag_s(beats, lags))

    def heartbeat(self, round_trip_ms: float | None = None, send_lag_s: float = 0.0) -> None:
        """Record this worker's heartbeat in the fleet's hash of workers, its round trip to
        the database in the fleet's hash of round trips, and how long its sends take now
        in the fleet's hash of send lags."""
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.hset(self.workers_key, self.owner, str(time.time()))
            if round_trip_ms is not None:
                pipe.hset(self.round_trips_key, self.owner, f"{round_trip_ms:.3f}")
            pipe.hset(self.send_lags_key, self.owner, f"{send_lag_s:.3f}")
            pipe.execute()
        except redis.RedisError:
            logger.warning("could not record this worker's heartbeat", exc_info=True)

    def round_trips(self) -> list[float]:
        """The round trips (ms) the other workers that beat lately reported."""
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.hgetall(self.workers_key)
            pipe.hgetall(self.round_trips_key)
            beats, trips = pipe.execute()
        except redis.RedisError:
            return []
        live = self._beat_lately(beats)
        return [
            float(ms) for key, ms in trips.items() if key in live and key.decode() != self.owner
        ]

    def queued(self) -> int | None:
        """How many messages wait in the queues (every priority step)."""
        try:
            pipe = self.client.pipeline(transaction=False)
            for key in self.lists:
                pipe.llen(key)
            return int(sum(pipe.execute()))
        except redis.RedisError:
            return None

    def sign_off(self) -> None:
        """Take this worker out of the fleet's hash: its silence is no death."""
        try:
            self.client.hdel(self.workers_key, self.owner)
            self.client.hdel(self.round_trips_key, self.owner)
            self.client.hdel(self.send_lags_key, self.owner)
        except redis.RedisError:
            logger.warning("could not sign this worker off", exc_info=True)

    def _send_lag_s(self, beats: dict[bytes, bytes], lags: dict[bytes, bytes]) -> float:
        """The longest send lag the live workers reported (a silent one sends nothing)."""
        live = self._beat_lately(beats)
        return max((float(lag) for key, lag in lags.items() if key in live), default=0.0)

    def _beat_lately(self, beats: dict[bytes, bytes]) -> set[bytes]:
        """The workers (keys of ``beats``) whose last heartbeat is within ``silence_s``."""
        now = time.time()
        return {key for key, at in beats.items() if now - float(at) <= self.silence_s}

    def _silent(self, beats: dict[bytes, bytes]) -> tuple[int, float | None]:
        """How many workers are presumed dead, and by when the last of them had died."""
        # A worker silent for longer than kombu's visibility timeout has had its messages
        # handed back: it is forgotten.
        now = time.time()
        silent, last_beat, forgotten = 0, None, []
        # A worker killed on this host is known dead at once, not after ``silence_s``.
        gone = set(dead_owners((key.decode() for key in beats), host=self.host))
        for key, at in beats.items():
            owner = key.decode()
            if owner == self.owner:
                # A saturated worker can be slow to beat, but is never dead to itself.
                continue
            beat_at = float(at)
            age_s = now - beat_at
            if age_s > FORGET_AFTER_S:
                forgotten.append(key)
            elif age_s > self.silence_s or owner in gone:
                silent += 1
                last_beat = beat_at if last_beat is None else max(last_beat, beat_at)
        if forgotten:
            self.client.hdel(self.workers_key, *forgotten)
            self.client.hdel(self.send_lags_key, *forgotten)
        return silent, None if last_beat is None else last_beat + self.beat_s

    def twin(self) -> RedisBrokerProbe:
        """The same probe on a client of its own: a green worker's connections belong to the
        thread that opened them."""
        return RedisBrokerProbe(
            self.url,
            prefix=self.prefix,
            queues=self.queues,
            owner=self.owner,
            silence_s=self.silence_s,
            beat_s=self.beat_s,
        )

    def close(self) -> None:
        """Close the connections."""
        self.client.close()


def _ids(messages: Iterable[bytes]) -> list[str]:
    found = []
    for message in messages:
        match = _TASK_ID.search(message)
        if match is not None:
            found.append(match.group(1).decode())
    return found


def dead_owners(owners: Iterable[str], *, host: str) -> list[str]:
    """The owners (``host:pid``, of leases or heartbeats) that are processes of ``host``
    no longer running.

    A worker killed on this host is known dead at once: its leases are taken over instead
    of lapsing, and its heartbeat counts as silent. A pid reused since is taken for alive:
    that lease then lapses on its own, and that worker falls silent.
    """
    dead = []
    for owner in owners:
        owner_host, _, pid = owner.rpartition(":")
        if owner_host == host and pid.isdigit() and not psutil.pid_exists(int(pid)):
            dead.append(owner)
    return dead
