"""Re-dispatch what the database says should run and does not.

Redis only wakes workers up: a message may be lost (broker restart), late or duplicated.
The reconciler looks at the source of truth and sends again whatever is due:
undispatched outbox rows (a wave start), sessions whose lease lapsed or whose owner is a
dead process on this host (a dead worker), and sessions whose message is lost.

A due session no worker has claimed is not lost because it waited long: in a saturated
fleet turns wait in the queue for longer than any fixed delay, and sending them again
floods the queue with duplicates that are consumed only to be skipped. So, when it can read
the broker (:mod:`worker.fleet.broker`), the reconciler sends again only what the broker
does not hold: a message still queued is waiting, one a worker reserved is about to run
(unless a worker of the fleet died, silent for long or, on this host, its process gone:
one reserved before it died, or longer than ``redispatch_after_s`` ago, may be the dead
worker's). A message the broker does not hold on two passes in a row, once
:data:`SENT_WITHIN_S` have passed since its dispatch (15 s for a wave's first turns, sent
all at once; at most half of ``redispatch_after_s``) and twice as long as the fleet's
slowest sender takes now (every worker reports it with its heartbeat: a saturated one
takes seconds), is lost (a restarted Redis loses them all, a worker cut off from Redis
could not send it) and is sent again at once.
Without a readable broker, the delays alone decide. Sending twice stays harmless: a turn
or a verification claims a lease, and only its holder commits.

Each pass also times one statement's round trip to the database and reports it with the
worker's heartbeat. A worker whose round trip is far longer than the other workers' (a
slow or lossy link: every turn makes several) takes no work while theirs leaves none
waiting in the queues (:mod:`worker.fleet.intake`): its turns would hold their sessions,
and a wave, back for seconds each.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timedelta

from sqlalchemy import text

from worker.fleet.broker import BrokerProbe, BrokerView, dead_owners
from worker.fleet.dispatch import SENT_WITHIN_S
from worker.fleet.identity import this_host
from worker.fleet.intake import Intake, on_slow_link
from worker.fleet.native import green, sleep_thread, start_native
from worker.fleet.runtime import Runtime
from worker.store import cache_alarm, due, endings, waves

logger = logging.getLogger(__name__)


def _first_turn(u: due.Unclaimed) -> bool:
    """A session's first turn: sent with the rest of its wave, when the wave starts."""
    return u.dispatch.kind == "turn" and u.dispatch.number == 0


def _older(u: due.Unclaimed, than: datetime) -> bool:
    return u.dispatched_at is None or u.dispatched_at < than


#: Seconds between two heartbeats of a green worker's native pulse (the fleet presumes a
#: worker dead after 30 s of silence).
BEAT_S = 5.0

#: Seconds after which an ending no worker has counted on its wave is the reconciler's to
#: count: its worker counts it right after the commit, unless it died in between.
COUNT_AFTER_S = 10.0

#: Why a worker on a slow link takes no work (:class:`Intake`).
SLOW_LINK = "slow link"


class Reconciler:
    """One reconciler of a worker process; it remembers the messages it missed last pass.

    Args:
        rt: The process's runtime.
        probe: Reads the broker; None to decide by delays alone.
    """

    def __init__(
        self, rt: Runtime, probe: BrokerProbe | None = None, intake: Intake | None = None
    ) -> None:
        self.rt = rt
        self.probe = probe
        self.intake = intake
        self.missing: set[str] = set()
        """Task ids due and not on the broker at the previous pass."""
        self.host = this_host()
        self.backlog = 0
        """Passes in a row that found work waiting in the queues."""
        self.slow = 0
        """Passes in a row that found this worker's link slow next to the fleet's."""
        self.round_trip_ms: float | None = None
        """The last pass's round trip to the database, if measured."""
        self.cache_watch = cache_alarm.CacheWatch()
        """The runs' cache share, read a pass's new calls at a time."""

    def run_once(self) -> int:
        """One pass; returns how many tasks were sent."""
        rt, now = self.rt, self.rt.clock()
        if self.probe is not None:
            round_trip_ms = self.round_trip_ms = self._round_trip_ms()
            self.probe.heartbeat(round_trip_ms, rt.send_lag_s())
            if self.intake is not None and round_trip_ms is not None:
                self._mind_link(self.probe, self.intake, round_trip_ms)
            # Before the database is read (it may be the reason this worker takes no work):
            # the queues of workers gone, and this one's while it takes none, go back to
            # the shared queue for the fleet.
            self.probe.sweep(own_too=self.intake is not None and bool(self.intake.paused))
        settings = rt.settings
        stale = now - timedelta(seconds=settings.redispatch_after_s)
        stale_verify = now - timedelta(seconds=settings.verify_redispatch_after_s)
        # A message is sent right after its commit, but a wave's first turns go out one
        # after the other, which takes a busy sender a while: none younger is missed.
        # Any other goes out alone, right after the turn or handoff that made it due.
        bulk = now - timedelta(seconds=min(settings.redispatch_after_s / 2, 15.0))
        alone = now - timedelta(seconds=min(settings.redispatch_after_s / 2, SENT_WITHIN_S))
        # Endings a dead worker committed and never counted, and waves a dead worker filled
        # and never closed: the next wave waits on them.
        uncounted = now - timedelta(seconds=COUNT_AFTER_S)
        closed = endings.count_endings(rt.engine, now=now, ended_before=uncounted)
        with rt.engine.begin() as conn:
            closed = endings.close_full_waves(conn, now=now) or closed
            outbox = waves.take_outbox(conn, now=now, older_than=None if closed else stale)
            dead = dead_owners(due.lease_owners(conn, now=now), host=self.host)
            lapsed = due.claim_lapsed(conn, now=now, dead_owners=dead)
            waiting = due.unclaimed(conn, before=alone if self.probe else stale)
        dispatches = outbox + lapsed
        if self.probe is not None:
            waiting = [u for u in waiting if not _first_turn(u) or _older(u, bulk)]
        view = self.probe.view() if self.probe is not None and waiting else None
        lost = [u for u in waiting if self._lost(u, view, stale, stale_verify)]
        if view is not None:
            held = view.queued | view.reserved.keys()
            # Missed on two passes in a row, a message is lost (see _lost).
            self.missing = {u.task_id for u in waiting if u.task_id not in held}
        if lost:
            with rt.engine.begin() as conn:
                resent = due.redispatch(conn, items=lost, now=now)
            dispatches += resent
            # Those claimed or sent by another reconciler since were not sent again.
            sent_again = {d.task_id for d in resent}
            lost = [u for u in lost if u.task_id in sent_again]
        if dispatches:
            logger.info(
                "reconciler re-dispatching %d task(s): %d from the outbox, %d of lapsed or "
                "dead leases, %d lost (%s)",
                len(dispatches),
                len(outbox),
                len(lapsed),
                len(lost),
                _why_lost(lost, view),
            )
        sent = rt.send_all(dispatches)
        rt.providers.release_ended_runs()
        # A run that ended since the last few passes is looked at once more: its last
        # turns came after the previous look.
        ended_since = now - timedelta(seconds=max(4 * settings.reconcile_interval_s, 30.0))
        with rt.engine.begin() as conn:
            self.cache_watch.watch(conn, now=now, ended_since=ended_since)
        return sent

    def _round_trip_ms(self) -> float | None:
        """How long one statement takes to come back from the database, on the leases'
        own connection (no queue for the pool), or None if it failed."""
        if self.rt.settings.is_sqlite:
            return None
        started = time.perf_counter()
        try:
            with self.rt.leases.engine.connect() as conn:
                conn.execute(text("select 1"))
        except Exception:  # an outage is the tasks' to report
            return None
        return (time.perf_counter() - started) * 1000

    def _mind_link(self, probe: BrokerProbe, intake: Intake, round_trip_ms: float) -> None:
        """Take no work while this worker's link is slow next to the fleet's on two passes
        in a row, unless the fleet leaves work waiting in the queues on two in a row."""
        slow = on_slow_link(round_trip_ms, probe.round_trips())
        self.slow = self.slow + 1 if slow else 0
        self.backlog = self.backlog + 1 if slow and probe.queued() else 0
        # Two passes in a row, either way: one slow statement is no slow link.
        if self.slow >= 2 and self.backlog < 2:
            if intake.pause(SLOW_LINK):
                logger.warning(
                    "a round trip to the database takes %.0f ms here, far longer than on "
                    "the fleet's other workers",
                    round_trip_ms,
                )
        else:
            intake.resume(SLOW_LINK)

    def _lost(
        self,
        u: due.Unclaimed,
        view: BrokerView | None,
        stale: datetime,
        stale_verify: datetime,
    ) -> bool:
        """Whether ``u``'s message is lost, as the broker's ``view`` (if any) tells."""
        since = stale if u.dispatch.kind == "turn" else stale_verify
        overdue = u.dispatched_at is None or u.dispatched_at < since
        if view is None:
            return overdue
        if u.task_id in view.queued:
            return False
        reserved_at = view.reserved.get(u.task_id)
        if reserved_at is not None:
            # Reserved by a live worker, it runs as soon as that worker gets to it (a
            # saturated one can take long). Only when a worker fell silent may a message
            # reserved before it died be its, and kombu would hand it back only after its
            # visibility timeout. Sent again, one a live worker holds is skipped once.
            if not view.silent_workers:
                return False
            window_s = (self.rt.clock() - since).total_seconds()
            if u.dispatched_at is not None:
                reserved_at = max(reserved_at, u.dispatched_at.timestamp())
            died_since = view.dead_by is not None and reserved_at <= view.dead_by
            return died_since or reserved_at < time.time() - window_s
        # Not even an overdue message is lost on one look: between the queue and the
        # unacknowledged hash it is in a worker's hands (a busy one can take seconds), and
        # then in neither. Nor is one due more recently than twice as long as the fleet's
        # slowest sender takes now: a saturated worker may still be sending it (its commit
        # and its send each wait seconds for the loop).
        if u.dispatched_at is not None:
            sending_since = self.rt.clock() - timedelta(seconds=2 * view.send_lag_s)
            if u.dispatched_at >= sending_since:
                return False
        return u.task_id in self.missing


def _why_lost(lost: list[due.Unclaimed], view: BrokerView | None) -> str:
    """How the reconciler told that ``lost`` messages were lost, for its log line: missed
    by the broker twice, reserved by a worker that fell silent, or overdue while the
    broker could not be read (or is not Redis)."""
    reserved = 0 if view is None else sum(u.task_id in view.reserved for u in lost)
    missing = 0 if view is None else len(lost) - reserved
    unseen = len(lost) if view is None else 0
    return (
        f"{missing} missing twice, {reserved} reserved by a silent worker, {unseen} overdue unseen"
    )


class ReconcilerThread(threading.Thread):
    """Runs :meth:`Reconciler.run_once` every ``interval_s`` until stopped."""

    def __init__(
        self,
        rt: Runtime,
        interval_s: float,
        probe: BrokerProbe | None = None,
        intake: Intake | None = None,
    ) -> None:
        super().__init__(name="swarm-reconciler", daemon=True)
        self.reconciler = Reconciler(rt, probe, intake)
        self.interval_s = interval_s
        self._stop_event = threading.Event()
        self._beating = threading.Lock()

    def run(self) -> None:
        if self.reconciler.probe is not None and green():
            # A pass comes late in a saturated green worker; the heartbeat must not, or
            # the fleet takes this worker for dead and sends its reserved messages again.
            start_native(self._pulse, name="swarm-pulse")
        # The first pass runs at once: a worker started after a crash takes over its work.
        while True:
            try:
                self.reconciler.run_once()
            except Exception:  # the database may be restarting; try again next period
                logger.warning("reconciler pass failed", exc_info=True)
            if self._stop_event.wait(self.interval_s):
                return

    def _pulse(self) -> None:
        """Beat on a native thread, every :data:`BEAT_S`, until stopped."""
        assert self.reconciler.probe is not None
        probe = self.reconciler.probe.twin()  # its connections are this thread's
        while True:
            with self._beating:
                if self._stop_event.is_set():
                    return
                probe.heartbeat(self.reconciler.round_trip_ms, self.reconciler.rt.send_lag_s())
            sleep_thread(min(self.interval_s, BEAT_S))

    def stop(self) -> None:
        """Stop after the current pass; a warm shutdown hands its reserved messages back."""
        with self._beating:  # no beat after the sign-off
            self._stop_event.set()
            if self.reconciler.probe is not None:
                self.reconciler.probe.sign_off()
