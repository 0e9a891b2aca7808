"""Celery's gevent pool, whose tasks' greenlets are freed as soon as they end.

Celery's gevent pool gives every task's greenlet a ``terminate`` method bound to that same
greenlet (for a revoke that terminates): a reference cycle, so a greenlet that has ended is
not freed by its reference count but waits for the cyclic collector, with all it holds (the
stack it was spawned from, its gevent locals, its context). A turn's greenlet lives through
its model call, long enough to be moved to the oldest generation, which a worker collects
rarely (:mod:`worker.fleet.collector`). At 10,000 sessions on two processes each process
held about 10,000 ended greenlets beside its 5,000 running ones when its memory peaked; at
2,000 sessions a full collection found 140,000 to 160,000 unreachable objects a process
(with this pool: 10 to 300).

:class:`TaskPool` gives each greenlet the same ``terminate``, calling Celery's through a
weak reference to the greenlet: no cycle, and the greenlet goes with its last reference.
"""

from __future__ import annotations

import weakref
from functools import partial
from typing import Any

from celery.concurrency import gevent as celery_gevent

__all__ = ["TaskPool"]


class TaskPool(celery_gevent.TaskPool):  # type: ignore[misc]
    """Celery's gevent pool, without the cycle each task's greenlet is given."""

    def on_apply(self, *args: Any, **kwargs: Any) -> Any:
        greenlet = super().on_apply(*args, **kwargs)
        greenlet.terminate = partial(_terminate, weakref.ref(greenlet))
        return greenlet


def _terminate(greenlet: weakref.ref[Any], signal: Any = None) -> None:
    """Celery's ``terminate`` of the greenlet, while it is alive."""
    alive = greenlet()
    if alive is not None:
        celery_gevent._terminate(alive, signal)
