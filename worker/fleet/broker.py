"""What the broker holds: the task ids still queued, and those reserved by a worker.

The reconciler asks before it sends a due turn again: a message still waiting in a busy
queue is not lost, and sending it again only makes a duplicate that the fleet must then
consume and skip. kombu's Redis transport keeps a queue as a list (one per priority step),
and the messages workers hold unacknowledged in the ``unacked`` hash, with the time each
was delivered in the ``unacked_index`` sorted set; every key under the fleet's prefix.
Which worker holds which message is not recorded, so every worker also beats in a hash of
the fleet's workers: while none has fallen silent, a reserved message is waiting for a
live worker, however long a saturated worker takes to start it.

A worker process that runs its turns itself also consumes a queue of its own
(:func:`own_queue`), where it sends its sessions' next turns: the history its cache holds is
then read on, not read again whole, and no other process keeps a copy of it. Its messages
are the fleet's like any other's: the probe counts them as queued, and
:meth:`RedisBrokerProbe.sweep` moves the queue of a worker that stopped, fell silent or
died on this host (and of one that takes no work) to the head of the shared queue. The
queues are recorded in a hash of the fleet's (queue to owner), kept until their owner has
been gone for longer than kombu's visibility timeout twice over: until then a message the
dead worker held may still be handed back to its queue.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, cast

import psutil
import redis

from worker.fleet.identity import this_host
from worker.settings import SESSIONS_QUEUE

logger = logging.getLogger(__name__)

#: The id of a turn or verify task in a message's headers (Celery's message protocol 2).
_TASK_ID = re.compile(rb'"id": ?"((?:turn|verify):\d+:\d+)"')
#: kombu's separator between a queue's name and its priority step.
_PRIORITY_SEP = "\x06\x16"
#: kombu's default priority steps: a queue is up to four lists.
_PRIORITY_STEPS = (0, 3, 6, 9)
#: Seconds after which a silent worker is forgotten (the transport's visibility timeout).
FORGET_AFTER_S = 3600.0
#: Seconds after which the own queue of a worker gone since is forgotten: kombu hands a
#: message a dead worker held back to its queue once the visibility timeout has passed.
FORGET_QUEUE_AFTER_S = 2 * FORGET_AFTER_S
#: kombu's binding tables of a queue (``exchange`` is the queue's own name).
_BINDING_KEYS = ("_kombu.binding.{}", "_kombu.binding_permanent.{}")

#: Moves every message of the lists KEYS[1..n-1] to the end of KEYS[n] that consumers read
#: first, one atomic move at a time; returns how many it moved.
_SPILL = """
local moved = 0
for i = 1, #KEYS - 1 do
  while redis.call('LMOVE', KEYS[i], KEYS[#KEYS], 'RIGHT', 'RIGHT') do
    moved = moved + 1
  end
end
return moved
"""


def own_queue(owner: str) -> str:
    """The queue of worker process ``owner`` (``host:pid``) for its sessions' next turns."""
    return f"{SESSIONS_QUEUE}@{owner}"


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

    def sweep(self, *, own_too: bool = False) -> int:
        """Hand the own queues of workers gone (and this one's, if ``own_too``) back to the
        shared queue; returns how many messages moved."""
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
        own_queue: This worker's own queue (:func:`own_queue`), if it consumes one.
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
        own_queue: str | None = None,
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
        self.own_queue = own_queue
        self.own_queues_key = f"{prefix}own_queues"
        """The fleet's own queues: queue name to its worker (``host:pid``)."""
        self.gone_key = f"{prefix}own_queues_gone"
        """Own queues whose worker is gone: queue name to when it was first found gone."""
        self.lists = [key for q in queues for key in self._lists_of(q)]
        self._spill = self.client.register_script(_SPILL)

    def _lists_of(self, queue: str) -> list[str]:
        """The lists that hold ``queue``'s messages, one per priority step."""
        prefix = self.prefix
        return [
            f"{prefix}{queue}{_PRIORITY_SEP}{p}" if p else f"{prefix}{queue}"
            for p in _PRIORITY_STEPS
        ]

    def view(self) -> BrokerView | None:
        """Read the queues (the workers' own too), then the reserved messages (a message
        moves that way)."""
        try:
            owned = cast(list[bytes], self.client.hkeys(self.own_queues_key))
            pipe = self.client.pipeline(transaction=False)
            for key in self.lists + [k for q in sorted(owned) for k in self._lists_of(q.decode())]:
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
            if self.own_queue is not None:
                # Again every beat: a restarted Redis lost the fleet's hash.
                pipe.hset(self.own_queues_key, self.own_queue, self.owner)
            pipe.execute()
        except redis.RedisError:
            logger.warning("could not record this worker's heartbeat", exc_info=True)

    def register(self) -> bool:
        """Record this worker's own queue with the fleet's; True once it is recorded.

        Until then the worker sends nothing there: a message in a queue the fleet does not
        know of would be taken for lost, and would not be handed back if the worker died.
        """
        if self.own_queue is None:
            return False
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.hset(self.own_queues_key, self.own_queue, self.owner)
            pipe.hdel(self.gone_key, self.own_queue)
            pipe.execute()
        except redis.RedisError:
            logger.warning("could not record this worker's own queue", exc_info=True)
            return False
        return True

    def sweep(self, *, own_too: bool = False) -> int:
        """Move the messages of every own queue whose worker is gone (it signed off, fell
        silent, or is a dead process of this host) to the head of the shared queue, and
        forget the queues gone for :data:`FORGET_QUEUE_AFTER_S`; returns how many moved.

        Args:
            own_too: This worker's own queue too (it takes no work now).
        """
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.hgetall(self.own_queues_key)
            pipe.hgetall(self.gone_key)
            pipe.hgetall(self.workers_key)
            owned, gone_at, beats = pipe.execute()
            live = self._beat_lately(beats)
            live -= {o.encode() for o in dead_owners((k.decode() for k in live), host=self.host)}
            now, moved, found_gone, forgotten = time.time(), 0, {}, []
            head = f"{self.prefix}{SESSIONS_QUEUE}"
            for key, owner in owned.items():
                queue = key.decode()
                mine = owner.decode() == self.owner
                if (owner in live and not mine) or (mine and not own_too):
                    continue
                moved += int(self._spill(keys=[*self._lists_of(queue), head]))
                if mine:
                    continue
                if key not in gone_at:
                    found_gone[key] = str(now)
                elif now - float(gone_at[key]) > FORGET_QUEUE_AFTER_S:
                    forgotten.append(key)
            back = [key for key in gone_at if key in owned and owned[key] in live]
            pipe = self.client.pipeline(transaction=False)
            if found_gone:
                pipe.hset(self.gone_key, mapping=found_gone)
            if back or forgotten:
                pipe.hdel(self.gone_key, *back, *forgotten)
            if forgotten:
                pipe.hdel(self.own_queues_key, *forgotten)
                for key in forgotten:
                    pipe.delete(*(f"{self.prefix}{b.format(key.decode())}" for b in _BINDING_KEYS))
            pipe.execute()
        except redis.RedisError:
            logger.warning("could not hand the stopped workers' queues back", exc_info=True)
            return 0
        if moved:
            logger.info("handed %d message(s) of stopped workers' own queues back", moved)
        return moved

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
        """Take this worker out of the fleet's hash (its silence is no death), and hand its
        own queue back: the fleet's sweeps hand back whatever kombu returns there later."""
        if self.own_queue is not None:
            self.sweep(own_too=True)
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
            own_queue=self.own_queue,
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
