"""A worker cut off from its database takes no work until it reaches the database again.

A host that reaches Redis but not PostgreSQL would otherwise go on taking turns from the
queue, each to wait on a statement that cannot be answered while the other hosts, which
could run it, stand idle. The first task of the process to meet a lost connection
(:func:`~worker.store.engine.connection_lost`) reports it here: the worker stops consuming
its queues (Celery's own ``cancel_consumer`` control, addressed to this worker), and the
task is sent again at once for another host to run. A thread then tries the database
every :data:`PROBE_S` seconds, and once a statement is answered the worker consumes the
same queues again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Protocol

from sqlalchemy import Engine, text

logger = logging.getLogger(__name__)

#: Seconds between two tries of an unreachable database.
PROBE_S = 1.0


class Control(Protocol):
    """What :class:`Outage` needs of Celery's remote control (``app.control``)."""

    def cancel_consumer(self, queue: str, **kwargs: object) -> object:
        """Tell workers to stop consuming ``queue``."""
        ...

    def add_consumer(self, queue: str, **kwargs: object) -> object:
        """Tell workers to consume ``queue``."""
        ...


class Outage:
    """This worker's view of its database: reachable, or cut off and being probed.

    Args:
        control: The app's remote control.
        engine: The database the worker's tasks use.
        probe_s: Seconds between two tries while it is unreachable.
    """

    def __init__(self, control: Control, engine: Engine, probe_s: float = PROBE_S) -> None:
        self.control = control
        self.engine = engine
        self.probe_s = probe_s
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.tries = 0
        """Tries of the database since the outage began."""

    @property
    def cut_off(self) -> bool:
        """Whether the worker is waiting for its database."""
        return self._thread is not None

    def report(self, *, worker: str, queues: Sequence[str]) -> bool:
        """A task of ``worker`` could not reach the database: stop consuming ``queues``
        until it can. Returns False if the outage was already known."""
        with self._lock:
            if self._thread is not None:
                return False
            self.tries = 0
            self._thread = threading.Thread(
                target=self._wait, args=(worker, list(queues)), name="swarm-outage", daemon=True
            )
            self._thread.start()
        return True

    def reachable(self) -> bool:
        """Whether the database answers a statement now."""
        try:
            with self.engine.connect() as conn:
                conn.execute(text("select 1"))
        except Exception:  # any failure: still cut off
            return False
        return True

    def _wait(self, worker: str, queues: list[str]) -> None:
        logger.warning(
            "database unreachable: %s stops taking work from %s until it answers",
            worker,
            ", ".join(queues),
        )
        self._tell("cancel_consumer", worker, queues)
        while not self.reachable():
            self.tries += 1
            time.sleep(self.probe_s)
        self._tell("add_consumer", worker, queues)
        logger.warning(
            "database reachable again after %d tries: %s takes work again", self.tries, worker
        )
        with self._lock:
            self._thread = None

    def _tell(self, what: str, worker: str, queues: list[str]) -> None:
        for queue in queues:
            try:
                getattr(self.control, what)(queue, destination=[worker], reply=False)
            except Exception:  # the broker may be cut off too; the reconciler covers it
                logger.warning("could not %s %s for %s", what, queue, worker, exc_info=True)
