"""Whether a worker takes work from its queues, and why it does not.

A worker stops taking work for a reason and takes it again once no reason is left: its
database cannot be reached (:mod:`worker.fleet.outage`), or its link is slow next to the
fleet's while the fleet leaves no work waiting (:func:`on_slow_link`). It stops and starts
through Celery's own remote control, addressed to itself (``cancel_consumer`` and
``add_consumer``): the tasks it holds run to their end, and the queues' next messages go
to the other workers.
"""

from __future__ import annotations

import logging
import statistics
import threading
from collections.abc import Sequence
from typing import Protocol

logger = logging.getLogger(__name__)

#: A worker whose round trip to the database takes this many times the fleet's median,
#: and at least :data:`SLOW_FLOOR_MS`, is on a slow link. The round trip is timed in the
#: worker, so a worker whose own CPU is saturated (a green pool's loop running behind)
#: reads it long too: the floor is far above what that costs a statement on a busy host,
#: and far below what a slow link costs it (a hundred milliseconds a round trip).
SLOW_FACTOR = 5.0
SLOW_FLOOR_MS = 100.0


class Control(Protocol):
    """What :class:`Intake` needs of Celery's remote control (``app.control``)."""

    def cancel_consumer(self, queue: str, **kwargs: object) -> object:
        """Tell workers to stop consuming ``queue``."""
        ...

    def add_consumer(self, queue: str, **kwargs: object) -> object:
        """Tell workers to consume ``queue``."""
        ...


def on_slow_link(own_ms: float, others_ms: Sequence[float]) -> bool:
    """Whether a round trip of ``own_ms`` is slow next to the other workers' ``others_ms``.

    A worker alone, or one as slow as the rest (a fleet under load), is not: only one the
    others could stand in for, at a fraction of its latency.
    """
    if not others_ms:
        return False
    return own_ms > max(SLOW_FACTOR * statistics.median(others_ms), SLOW_FLOOR_MS)


class Intake:
    """This worker's consumption of its queues, stopped while any reason holds.

    Args:
        control: The app's remote control.
    """

    def __init__(self, control: Control) -> None:
        self.control = control
        self._lock = threading.Lock()
        self._why: set[str] = set()
        self._worker: str | None = None
        self._queues: list[str] = []

    def bind(self, worker: str, queues: Sequence[str]) -> None:
        """Name the worker (its node name) and the queues it consumes, once it runs."""
        with self._lock:
            if self._worker is None:
                self._worker, self._queues = worker, list(queues)

    @property
    def paused(self) -> frozenset[str]:
        """The reasons the worker takes no work now (empty: it takes work)."""
        with self._lock:
            return frozenset(self._why)

    def pause(self, reason: str) -> bool:
        """Stop taking work for ``reason``; True if the worker was taking work."""
        with self._lock:
            was_taking = not self._why
            self._why.add(reason)
            if was_taking:
                logger.warning("%s stops taking work: %s", self._worker, reason)
                self._tell("cancel_consumer")
            return was_taking

    def resume(self, reason: str) -> bool:
        """``reason`` no longer holds; True if the worker takes work again."""
        with self._lock:
            if reason not in self._why:
                return False
            self._why.discard(reason)
            if self._why:
                return False
            logger.warning("%s takes work again: %s is over", self._worker, reason)
            self._tell("add_consumer")
            return True

    def _tell(self, what: str) -> None:
        if self._worker is None:
            return
        for queue in self._queues:
            try:
                getattr(self.control, what)(queue, destination=[self._worker], reply=False)
            except Exception:  # the broker may be cut off too; the reconciler covers it
                logger.warning("could not %s %s for %s", what, queue, self._worker, exc_info=True)
