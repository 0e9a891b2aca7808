"""A session's history as far as this process has read it, kept from one turn to the next.

A turn needs its session's whole conversation, but all of it except the last turn's events
was already read and decoded by the turn before, in most cases by this same process. A
:class:`Transcript` is that decoded history: the events and the model contents they make,
up to a mark (:class:`~worker.store.eventlog.LogMark`). The next turn's claim reads only
the events after the mark, having checked that the mark's event is still the same row, and
the transcript is extended by them. Any doubt (a turn that ran elsewhere is fine: its events
are simply read; a log rewritten under the mark is not) reads the whole log again, so what
a process keeps never decides what a turn sees: the database does.

What a transcript holds is shared by every later turn of its session, so it is read-only
all the way down (:mod:`worker.agent.frozen`): a tool, guard or model adapter that tried to
change a shared content would raise instead of corrupting the next turn's history.

The cache is bounded in bytes (``Settings.history_cache_mb``), least recently used first:
a process running more sessions than fit reads the rest whole, as every turn did before.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Engine

from worker.agent import history
from worker.agent.events import Event, decode
from worker.agent.frozen import freeze_sized
from worker.models.base import Content
from worker.settings import Settings
from worker.store.eventlog import LogMark
from worker.store.sessions import SessionView

__all__ = ["Transcript", "TranscriptCache", "cache_for"]

#: Bytes a decoded event costs besides its payload: the event object and its tuple slot.
_EVENT_BYTES = sys.getsizeof(decode("ended", {"status": "", "outcome": ""})) + 8


@dataclass(frozen=True)
class Transcript:
    """A session's decoded history up to ``mark``: read-only, shared across turns."""

    session_id: int
    mark: LogMark | None
    """The last event read (None: nothing read yet)."""
    events: tuple[Event, ...] = ()
    """The log's events, in order, their payloads frozen."""
    contents: tuple[Content, ...] = ()
    """``history.rebuild(events)``, frozen: the model request's history."""
    size_bytes: int = 0
    """About how many bytes it holds (its dicts, lists, strings and events)."""

    def extend(
        self,
        rows: Sequence[tuple[str, dict[str, Any]]],
        *,
        tail: LogMark | None,
        shared: bool = True,
    ) -> Transcript:
        """This history followed by the events ``rows`` (read after ``mark``) up to ``tail``.

        Args:
            rows: ``(kind, payload)`` of each event, as the log stores them.
            tail: The last of them.
            shared: Later turns will read it: its values are frozen (else left as they are,
                and not counted).
        """
        if not rows:
            return self if tail == self.mark else replace(self, mark=tail)
        freeze = freeze_sized if shared else _as_is
        size = self.size_bytes
        added: list[Event] = []
        for kind, payload in rows:
            frozen, nbytes = freeze(payload)
            added.append(decode(kind, frozen))
            size += nbytes + _EVENT_BYTES
        merged = history.extend(self.contents, added)
        # Only the last content may have been merged with what follows; the rest are kept.
        kept = max(len(self.contents) - 1, 0)
        fresh, nbytes = freeze(merged[kept:])
        return Transcript(
            self.session_id,
            tail,
            self.events + tuple(added),
            merged[:kept] + tuple(fresh),
            size + nbytes,
        )


def _as_is(value: Any) -> tuple[Any, int]:
    return value, 0


def follow(held: Transcript | None, view: SessionView, *, shared: bool = True) -> Transcript:
    """The session's history as the turn's claim read it.

    Args:
        held: What this process had read before, whose mark the claim was given.
        view: The claim's read: the events after ``held``'s mark, or the whole log.
        shared: It will be kept for later turns (:meth:`Transcript.extend`).

    Raises:
        ValueError: the view continues a mark ``held`` does not end at.
    """
    if view.log_after is None:
        base = Transcript(view.id, None)
    elif held is not None and held.session_id == view.id and held.mark == view.log_after:
        base = held
    else:
        raise ValueError(f"session {view.id}: the log read does not continue this history")
    return base.extend(view.events, tail=view.log_tail, shared=shared)


class TranscriptCache:
    """The histories a process keeps between turns, least recently used evicted first."""

    def __init__(self, *, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size_bytes = 0
        #: Turns that found their session's history here / did not / found it rewritten.
        self.hits = self.misses = self.stale = 0
        self._kept: OrderedDict[int, Transcript] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, session_id: int) -> Transcript | None:
        """The session's history as this process last read it, if it kept it."""
        with self._lock:
            held = self._kept.get(session_id)
            if held is None:
                self.misses += 1
                return None
            self._kept.move_to_end(session_id)
            self.hits += 1
            return held

    def advance(self, held: Transcript | None, view: SessionView) -> Transcript:
        """The session's history after the claim's read (:func:`follow`), kept for the next
        turn when the log can be read on from its end."""
        if held is not None and view.log_after is None:
            with self._lock:
                self.stale += 1
        # Kept, it is shared with later turns and frozen; with no room for it, or no mark to
        # read on from (SQLite), no later turn sees it.
        keep = self.max_bytes > 0 and view.log_tail is not None
        transcript = follow(held, view, shared=keep)
        if keep:
            self._put(transcript)
        return transcript

    def forget(self, session_id: int) -> None:
        """Drop the session's history (it ended: no turn will read it again)."""
        with self._lock:
            dropped = self._kept.pop(session_id, None)
            if dropped is not None:
                self.size_bytes -= dropped.size_bytes

    def _put(self, transcript: Transcript) -> None:
        with self._lock:
            old = self._kept.pop(transcript.session_id, None)
            if old is not None:
                self.size_bytes -= old.size_bytes
            if transcript.size_bytes > self.max_bytes:
                return
            self._kept[transcript.session_id] = transcript
            self.size_bytes += transcript.size_bytes
            while self.size_bytes > self.max_bytes:
                _, evicted = self._kept.popitem(last=False)
                self.size_bytes -= evicted.size_bytes


# The cache belongs to the process's runtime; it is keyed by the runtime's engine (the
# database whose rows it describes) so that runtimes on other databases never share one.
_caches: weakref.WeakKeyDictionary[Engine, TranscriptCache] = weakref.WeakKeyDictionary()
_caches_lock = threading.Lock()


def cache_for(*, engine: Engine, settings: Settings) -> TranscriptCache:
    """The process's cache of histories read through ``engine``."""
    with _caches_lock:
        cache = _caches.get(engine)
        if cache is None:
            cache = TranscriptCache(max_bytes=int(settings.history_cache_mb * 2**20))
            _caches[engine] = cache
        return cache
