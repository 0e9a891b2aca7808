"""Follow a run until it ends, woken by the database's change notifications."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

from rich.console import Console
from sqlalchemy import Engine

from scheduler.cli.services import WORKER_COMMAND, NoWorker
from scheduler.cli.views import RunProgress
from worker.fleet.sampler import Role
from worker.models.pricing import PriceTable
from worker.reads.figures import RunFigures, run_figures
from worker.reads.progress import Claims, claims_of, live_roles, run_ended
from worker.store.engine import run_listener, utcnow

logger = logging.getLogger(__name__)

#: Longest wait between two looks at the database (notifications usually come sooner).
REFRESH_S = 0.5
#: Shortest time between two computations of the figures a live progress bar shows: they
#: read every usage and timing row of the run, which at a thousand sessions costs the
#: database more than the run's own turns if done on every notification.
DISPLAY_REFRESH_S = 2.0
#: Seconds ``enqueue --follow`` lets due work go unclaimed before it says no worker runs.
DEFAULT_STALL_AFTER_S = 30.0
#: A worker process that wrote a resource sample this recently counts as alive.
LIVE_WITHIN_S = 15.0


def until_finished(
    engine: Engine,
    run_id: int,
    *,
    show: bool,
    timeout_s: float | None = None,
    prices: PriceTable | None = None,
    stall_after_s: float | None = None,
) -> RunFigures:
    """Block until the run ends; with ``show``, draw a live progress bar on stderr.

    Args:
        engine: The run's database.
        run_id: The run to follow.
        show: Draw the progress bar.
        timeout_s: Give up after this many seconds (None: wait for ever).
        prices: Prices of the figures' cost split (default: the built-in table).
        stall_after_s: When sessions are due and no worker has claimed any work of the run
            for this many seconds, give up if no worker is alive to take it, else warn
            once (None: never).

    Returns:
        The figures of the ended run.

    Raises:
        TimeoutError: the run did not end within ``timeout_s``.
        NoWorker: work was due and unclaimed for ``stall_after_s`` seconds, and no worker
            is alive to take it.
    """
    prices = prices if prices is not None else PriceTable.load()
    watch = _StallWatch(run_id, stall_after_s) if stall_after_s else None
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    progress = RunProgress(Console(stderr=True)) if show else nullcontext(None)
    shown_at: float | None = None
    with run_listener(engine) as listener, progress as update:
        while True:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} did not end within {timeout_s:g}s")
            # Each look reads the run's row; the figures only when they are shown, at most
            # every DISPLAY_REFRESH_S, and once the run has ended.
            with engine.connect() as conn:
                ended = run_ended(conn, run_id)
                due = shown_at is None or time.monotonic() - shown_at >= DISPLAY_REFRESH_S
                figures = (
                    run_figures(conn, run_id, prices=prices)
                    if ended or (update is not None and due)
                    else None
                )
                claims = claims_of(conn, run_id, now=utcnow()) if watch is not None else None
            if update is not None and figures is not None:
                update(figures)
                shown_at = time.monotonic()
            # A cancelled run is over once the turns it had in flight have ended too.
            if ended and figures is not None:
                return figures
            if watch is not None and claims is not None:
                watch.check(
                    claims,
                    now_s=time.monotonic(),
                    live_roles=lambda: live_roles(engine, recent_s=LIVE_WITHIN_S),
                )
            listener.wait(REFRESH_S)


@dataclass
class _StallWatch:
    """Notices when work of a run waits and nothing claims any of it for ``after_s``.

    Then, with no worker alive for the waiting work, it raises :class:`NoWorker`; with
    workers alive (a model's retry delay can hold every turn back for a minute) it warns
    once and keeps waiting, looking again every ``after_s``.
    """

    run_id: int
    after_s: float
    _last: tuple[int, ...] | None = None
    _since_s: float = 0.0
    _warned: bool = False

    def check(
        self, claims: Claims, *, now_s: float, live_roles: Callable[[], frozenset[str]]
    ) -> None:
        """Raise or warn once due work has gone unclaimed for ``after_s`` seconds.

        Args:
            claims: The run's claims now.
            now_s: A monotonic clock.
            live_roles: Reads the roles of the live workers (asked only after a stall).
        """
        waiting = claims.turns_waiting + claims.verdicts_waiting
        if claims.progress != self._last or not waiting:
            # Something moved, or nothing waits (turns in flight may take long): restart.
            self._last, self._since_s, self._warned = claims.progress, now_s, False
            return
        if now_s - self._since_s < self.after_s:
            return
        self._since_s = now_s
        queue = _missing_queue(claims, live_roles())
        if queue is not None:
            raise NoWorker(
                f"no worker has claimed work of run {self.run_id} for {self.after_s:g} s "
                f"and none is alive: is a worker running on the {queue} queue? "
                f"({WORKER_COMMAND}); the run stays queued and goes on when one starts"
            )
        if not self._warned:
            self._warned = True
            logger.warning(
                "workers are alive but none has claimed work of run %s for %g s "
                "(%s sessions wait): a model retry delay, or workers on another broker?",
                self.run_id,
                self.after_s,
                waiting,
            )


def _missing_queue(claims: Claims, live_roles: frozenset[str]) -> str | None:
    """The queue whose waiting work has no live worker to take it, if any."""
    if claims.turns_waiting and Role.sessions.value not in live_roles:
        return "sessions"
    # A worker on both queues samples itself as a sessions worker.
    if claims.verdicts_waiting and not live_roles:
        return "verify"
    return None
