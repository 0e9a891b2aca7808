"""Re-dispatch what the database says should run and does not.

Redis only wakes workers up: a message may be lost (broker restart), late or duplicated.
The reconciler looks at the source of truth and sends again whatever is due:
undispatched outbox rows (a wave start), sessions whose lease lapsed or whose owner is a
dead process on this host (a dead worker), and sessions whose message never came (a lost
turn or verification). Sending twice is harmless: a turn or a verification claims a
lease, and only its holder commits.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from datetime import timedelta

import psutil

from worker.fleet.runtime import Runtime
from worker.store import lifecycle

logger = logging.getLogger(__name__)


def reconcile_once(rt: Runtime) -> int:
    """One pass; returns how many tasks were sent."""
    now = rt.clock()
    stale = now - timedelta(seconds=rt.settings.redispatch_after_s)
    stale_verify = now - timedelta(seconds=rt.settings.verify_redispatch_after_s)
    with rt.engine.begin() as conn:
        dispatches = lifecycle.take_outbox(conn, now=now, older_than=stale)
        dispatches += lifecycle.claim_overdue(conn, now=now, stale=stale, stale_verify=stale_verify)
    if dispatches:
        logger.info("reconciler re-dispatching %d task(s)", len(dispatches))
    sent = rt.send_all(dispatches)
    rt.providers.release_ended_runs()
    return sent


def dead_owners(owners: Iterable[str], *, host: str) -> list[str]:
    """The lease owners (``host:pid``) that are processes of ``host`` no longer running.

    A worker killed on this host loses its leases at once instead of when they lapse. A
    pid reused since is taken for alive: that lease then lapses on its own.
    """
    dead = []
    for owner in owners:
        owner_host, _, pid = owner.rpartition(":")
        if owner_host == host and pid.isdigit() and not psutil.pid_exists(int(pid)):
            dead.append(owner)
    return dead


class ReconcilerThread(threading.Thread):
    """Runs :func:`reconcile_once` every ``interval_s`` until stopped."""

    def __init__(self, rt: Runtime, interval_s: float) -> None:
        super().__init__(name="swarm-reconciler", daemon=True)
        self.rt = rt
        self.interval_s = interval_s
        self._stop_event = threading.Event()

    def run(self) -> None:
        # The first pass runs at once: a worker started after a crash takes over its work.
        while True:
            try:
                reconcile_once(self.rt)
            except Exception:  # the database may be restarting; try again next period
                logger.warning("reconciler pass failed", exc_info=True)
            if self._stop_event.wait(self.interval_s):
                return

    def stop(self) -> None:
        """Stop after the current pass."""
        self._stop_event.set()
