"""Threads of the operating system's, under a green pool too.

Under a green pool (``-P gevent``) a patched thread is a greenlet, run only when the
greenlets ahead of it yield: in a saturated worker (thousands of turns, each doing a few
milliseconds of work between two waits) one came tens of seconds late. What must keep time
whatever the turns do (renewing leases, the heartbeat that tells the fleet this worker
lives) runs on a native thread: the interpreter hands it the GIL at its switch interval,
every few milliseconds. gevent's locks and the database and Redis clients' waits work there,
on a hub of that thread's own.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

__all__ = ["green", "sleep_thread", "start_native"]


def green() -> bool:
    """Whether this process runs on a green pool (gevent patched the standard library)."""
    if "gevent" not in sys.modules:
        return False
    from gevent import monkey

    return bool(monkey.is_module_patched("threading"))


def start_native(loop: Callable[[], None], *, name: str) -> None:
    """Run ``loop`` on a thread of the operating system's (a daemon)."""
    if green():
        import gevent

        gevent.get_hub().threadpool.spawn(loop)
    else:
        threading.Thread(target=loop, name=name, daemon=True).start()


def sleep_thread(seconds: float) -> None:
    """Sleep the calling thread (on a native thread under a green pool: that thread)."""
    if green():
        from gevent import monkey

        monkey.get_original("time", "sleep")(seconds)
    else:
        time.sleep(seconds)
