"""CPU time per greenlet, for a worker on a green pool (``celery worker -P gevent``).

Every task of a green pool runs on the same OS thread, so :func:`time.thread_time` counts
the CPU of every turn that ran while one turn waited on the database or the model. A
switch tracer charges the thread's CPU to the greenlet that was running until each switch,
so a turn's CPU is its own, as on a thread.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

import greenlet

__all__ = ["GreenletCpu"]


class GreenletCpu:
    """A clock of the CPU seconds the current greenlet has used (call it: ``clock()``).

    Installing it traces every greenlet switch of this thread for the life of the process.
    """

    def __init__(self) -> None:
        self._spent: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
        self._since = time.thread_time()
        greenlet.settrace(self._trace)

    def _trace(self, event: str, args: tuple[Any, Any]) -> None:
        if event != "switch" and event != "throw":
            return
        now = time.thread_time()
        origin = args[0]
        # An attribute of the greenlet itself, read and written in a few nanoseconds: the
        # tracer runs at every switch, dozens of times a turn.
        try:
            origin.swarm_cpu_s += now - self._since
        except AttributeError:
            try:
                origin.swarm_cpu_s = now - self._since
            except AttributeError:  # a greenlet that takes no attributes
                self._spent[origin] = self._spent.get(origin, 0.0) + now - self._since
        self._since = now

    def __call__(self) -> float:
        """CPU seconds used so far by the greenlet that calls."""
        current = greenlet.getcurrent()
        spent = getattr(current, "swarm_cpu_s", None)
        if spent is None:
            spent = self._spent.get(current, 0.0)
        return float(spent) + time.thread_time() - self._since
