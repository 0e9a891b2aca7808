"""Python's cyclic garbage collector, set for a process that keeps thousands of sessions.

A worker holds, for every session it runs, that session's decoded history (thousands of
read-only dicts and lists, :mod:`worker.agent.transcript`) and, for every turn in flight,
its task's request and greenlet. With the interpreter's defaults a full collection walks
all of them, and the modules loaded at start (Celery, SQLAlchemy, pydantic, the model SDK):
at 5,000 sessions a process it took about a third of a second of CPU each time, held every
greenlet for as long, and the collector took about a tenth of the worker's CPU.

:func:`settle` runs once, when the worker is ready: one collection, then everything alive
is moved out of the collector's sight for good (:func:`gc.freeze`: what is loaded at start
lives as long as the process), and the young generation is collected every
:data:`YOUNG_OBJECTS` new objects instead of 700. A turn's objects are freed by their
reference counts as it ends, so few ever reach a collection; the collector is left to the
rare cycle, and a full collection still comes once the objects that survived two younger
ones pass a quarter of those that live on (the interpreter's own rule).
"""

from __future__ import annotations

import gc
import logging

__all__ = ["YOUNG_OBJECTS", "settle"]

logger = logging.getLogger(__name__)

#: New container objects (less those freed) between two collections of the youngest
#: generation.
YOUNG_OBJECTS = 50_000
#: Collections of a generation between two of the next: the interpreter's 10 and 10 for
#: the first, more for the oldest, whose walk is the long one.
OLDER_EVERY = (20, 100)


def settle() -> None:
    """Collect once, freeze what is alive, and collect less often from now on."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_OBJECTS, *OLDER_EVERY)
    logger.debug("collector: %d objects frozen, thresholds %s", gc.get_freeze_count(), OLDER_EVERY)
