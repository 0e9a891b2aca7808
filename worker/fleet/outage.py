"""A worker cut off from its database takes no work until it reaches the database again.

A host that reaches Redis but not PostgreSQL would otherwise go on taking turns from the
queue, each to wait on a statement that cannot be answered while the other hosts, which
could run it, stand idle. The first task of the process to meet a lost connection
(:func:`~worker.store.engine.connection_lost`) reports it here: the worker stops taking
work (:class:`~worker.fleet.intake.Intake`), and the task is sent again at once for
another host to run. A thread then tries the database every :data:`PROBE_S` seconds, and
once a statement is answered the worker takes work again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from sqlalchemy import Engine, text

from worker.fleet.intake import Intake

logger = logging.getLogger(__name__)

#: Seconds between two tries of an unreachable database.
PROBE_S = 1.0
#: Why the worker takes no work, while it does not (:class:`Intake`).
REASON = "database unreachable"


class Outage:
    """This worker's view of its database: reachable, or cut off and being probed.

    Args:
        intake: The worker's consumption of its queues.
        engine: The database the worker's tasks use.
        probe_s: Seconds between two tries while it is unreachable.
    """

    def __init__(self, intake: Intake, engine: Engine, probe_s: float = PROBE_S) -> None:
        self.intake = intake
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
        self.intake.bind(worker, queues)
        with self._lock:
            if self._thread is not None:
                return False
            self.tries = 0
            self._thread = threading.Thread(target=self._wait, name="swarm-outage", daemon=True)
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

    def _wait(self) -> None:
        self.intake.pause(REASON)
        while not self.reachable():
            self.tries += 1
            time.sleep(self.probe_s)
        logger.warning("database reachable again after %d tries", self.tries)
        self.intake.resume(REASON)
        with self._lock:
            self._thread = None
