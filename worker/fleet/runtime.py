"""What a worker process holds: settings, the engine, prices, models and a way to send tasks."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Protocol, TypeVar

from sqlalchemy import Engine

from worker.fleet.dispatch import SENT_WITHIN_S, Dispatcher
from worker.fleet.identity import process_owner
from worker.fleet.leases import LeaseKeeper
from worker.models.base import FunctionCall, ModelRequest, ModelTurn
from worker.models.pricing import PriceTable
from worker.models.registry import Providers
from worker.settings import Settings
from worker.store import due, endings, waves
from worker.store.engine import make_engine, utcnow

logger = logging.getLogger(__name__)

#: Send times remembered for the turns this process dispatched, until one claims them.
SEND_TIMES_KEPT = 10_000
#: Seconds a slow send counts in :meth:`Runtime.send_lag_s` after it finished.
SEND_LAG_KEPT_S = 15.0
#: Seconds between two warnings of a slow send.
SLOW_SEND_WARN_S = 60.0
#: Share of the database pool that commits may hold at once; the rest stays free for claims.
COMMIT_SHARE = 0.5

_T = TypeVar("_T")


class TurnObserver(Protocol):
    """Told how each turn task ended and what each committed turn took (metrics)."""

    def after_turn(self, *, outcome: str) -> None:
        """A turn task ended: skipped, fenced, committed or ended."""
        ...

    def after_commit(
        self,
        *,
        model: str,
        phases_ms: Mapping[str, float | None],
        cpu_ms: float,
        tokens: Mapping[str, int],
        cost_usd: float,
    ) -> None:
        """A turn committed: its phases, CPU, tokens by kind and dollars."""
        ...


class Tracer(Protocol):
    """Records a session's turns, model calls, tool calls and verifications as spans."""

    def turn(self, *, session_id: int, run_id: int, turn_no: int) -> AbstractContextManager[None]:
        """The span of one turn, current while the block runs."""
        ...

    def model_call(
        self, request: ModelRequest, generate: Callable[[ModelRequest], ModelTurn]
    ) -> ModelTurn:
        """``generate(request)`` inside a model call's span."""
        ...

    def tool_call(self, call: FunctionCall, run: Callable[[FunctionCall], _T]) -> _T:
        """``run(call)`` inside a tool call's span."""
        ...

    def verification(self, *, session_id: int, round_no: int, judge: Callable[[], str]) -> str:
        """``judge()`` inside a verification's span; it returns what the verdict did."""
        ...

    def session_ended(self, *, session_id: int) -> None:
        """The session ended: its own span, over its whole life, closes its trace."""
        ...


@dataclass
class Runtime:
    """Dependencies of the turn loop and the verdict path, built once per process."""

    settings: Settings
    engine: Engine
    dispatcher: Dispatcher
    prices: PriceTable = field(default=None)  # type: ignore[assignment]
    """Defaults to the built-in table with the settings' price file on top."""
    owner: str = field(default_factory=process_owner)
    """This process, ``host:pid`` (:mod:`worker.fleet.identity`): its leases' owner."""
    clock: Callable[[], datetime] = utcnow
    cpu_clock: Callable[[], float] = time.thread_time
    """CPU seconds the running task has used: its thread's, or under a green pool its
    greenlet's (:class:`~worker.fleet.greenlets.GreenletCpu`)."""
    observer: TurnObserver | None = None
    """Told about every turn (the worker's metrics), if set."""
    tracer: Tracer | None = None
    """Records spans of every turn and verification (OpenTelemetry), if set."""
    lease_engine: Engine | None = None
    """Where leases are renewed. By default, on PostgreSQL, a connection of their own: in
    a saturated worker the task threads queue for the shared pool for seconds, and a lease
    renewed late lapses under a live worker, whose turn is then taken over and sent again."""

    def __post_init__(self) -> None:
        if self.prices is None:
            self.prices = PriceTable.load(self.settings.prices_file)
        self._send_ms: dict[tuple[int, int], float] = {}
        self._send_lock = threading.Lock()
        self._sending: dict[int, float] = {}
        """Sends in flight: a token to when each started (``time.monotonic``)."""
        self._tokens = itertools.count()
        self._slowest: tuple[float, float] = (0.0, 0.0)
        """The slowest send finished lately: seconds it took, and when it finished."""
        self._warned_at = -SLOW_SEND_WARN_S
        self._count_lock = threading.Lock()
        self._uncounted: set[int] = set()
        """Endings committed and not yet counted, left to the count under way."""
        self._counting = False
        size = getattr(self.engine.pool, "size", None)
        slots = size() if callable(size) else 1
        self.commit_gate = threading.BoundedSemaphore(max(1, int(slots * COMMIT_SHARE)))
        """Admits a turn's commit while fewer than :data:`COMMIT_SHARE` of the pool commit.

        At a fixed model latency a whole fleet's answers arrive together: were their
        commits let at the pool at once, the next turns' claims would queue behind every
        one of them, and each session's next model call would start only once the burst
        was over. Gated, the commits go in about the order their answers came (waiters
        are woken first come, first served) and a claim finds a connection at once, so a
        session's next call starts as soon as its commit ends."""

    @cached_property
    def leases(self) -> LeaseKeeper:
        """Renews the leases of this process's work in flight."""
        if self.lease_engine is None:
            self.lease_engine = (
                self.engine if self.settings.is_sqlite else make_engine(self.settings, pool=(1, 0))
            )
        return LeaseKeeper(
            engine=self.lease_engine,
            own_engine=self.lease_engine is not self.engine,
            owner=self.owner,
            ttl_s=self.settings.lease_ttl_s,
            renew_s=self.settings.lease_renew_s,
            clock=self.clock,
        )

    @cached_property
    def providers(self) -> Providers:
        """The process's model clients, shared by every turn."""
        return Providers(self.settings, engine=self.engine, prices=self.prices)

    def send_all(self, items: Iterable[due.Dispatch]) -> int:
        """Send tasks after their transaction committed; a lost send is the reconciler's."""
        sent, unsent = 0, []
        for item in items:
            token = next(self._tokens)
            started = time.monotonic()
            with self._send_lock:
                self._sending[token] = started
            try:
                self.dispatcher.send(item)
                if item.kind == "turn":
                    self._sent(item, (time.monotonic() - started) * 1000)
                sent += 1
            except Exception:  # the broker may be down; the database still says it is due
                logger.warning(
                    "could not send %s %s/%s; the reconciler will",
                    item.kind,
                    item.session_id,
                    item.number,
                    exc_info=True,
                )
                if not item.delay_s:  # a held first turn keeps the time it is due
                    unsent.append(item)
            finally:
                self._done_sending(token, started)
        if unsent:
            try:
                with self.engine.begin() as conn:
                    due.unsent(conn, items=unsent)
            except Exception:  # the reconciler still finds them, only later
                logger.warning("could not record %d unsent task(s)", len(unsent), exc_info=True)
        return sent

    def _done_sending(self, token: int, started: float) -> None:
        now = time.monotonic()
        with self._send_lock:
            del self._sending[token]
            took_s, at = self._slowest
            if now - started >= took_s or now - at > SEND_LAG_KEPT_S:
                self._slowest = (now - started, now)
            warn = now - started > SENT_WITHIN_S and now - self._warned_at > SLOW_SEND_WARN_S
            if warn:
                self._warned_at = now
        if warn:
            logger.warning(
                "a send took %.1fs (a busy worker or broker): the fleet's reconcilers wait "
                "as long before they take a missing message for lost",
                now - started,
            )

    def send_lag_s(self) -> float:
        """How long this process's sends take now: the age of its oldest send in flight,
        or the slowest one that finished in the last :data:`SEND_LAG_KEPT_S`.

        A saturated worker takes seconds to send what its commits made due; the fleet's
        reconcilers wait that long before they take a missing message for lost.
        """
        now = time.monotonic()
        with self._send_lock:
            oldest = min(self._sending.values(), default=now)
            took_s, at = self._slowest
        return max(now - oldest, took_s if now - at <= SEND_LAG_KEPT_S else 0.0)

    def _sent(self, item: due.Dispatch, ms: float) -> None:
        with self._send_lock:
            if len(self._send_ms) >= SEND_TIMES_KEPT:
                # Turns claimed by other processes are never taken: forget the oldest.
                del self._send_ms[next(iter(self._send_ms))]
            self._send_ms[(item.session_id, item.number)] = ms

    def send_ms(self, session_id: int, turn_no: int) -> float | None:
        """How long sending turn ``turn_no``'s task took, if this process sent it (once)."""
        with self._send_lock:
            return self._send_ms.pop((session_id, turn_no), None)

    def count_endings(self, session_ids: Iterable[int]) -> None:
        """Count sessions whose ending has committed on their waves, and start what a wave
        they closed made due (:func:`worker.store.endings.count_endings`).

        A fleet's sessions end together, and one statement counts any number of them
        where a statement each would take their wave's row one after the other. So the
        endings that come while this process counts others are counted together, by the
        caller already counting, as soon as its statement returns: a caller that finds a
        count under way leaves its endings to it and returns at once. Endings a count
        failed to record are left to the next one, or to the reconciler's.
        """
        with self._count_lock:
            self._uncounted.update(session_ids)
            if self._counting:
                return
            self._counting = True
        try:
            while True:
                with self._count_lock:
                    batch = sorted(self._uncounted)
                    self._uncounted.clear()
                    if not batch:
                        self._counting = False
                        return
                try:
                    closed = endings.count_endings(self.engine, now=self.clock(), session_ids=batch)
                except BaseException:
                    with self._count_lock:
                        self._uncounted.update(batch)
                    raise
                if closed:
                    self.flush_outbox()
        except BaseException:
            with self._count_lock:
                self._counting = False
            raise

    def flush_outbox(self, run_id: int | None = None) -> int:
        """Start the waves the database says are due, and send their first turns."""
        with self.engine.begin() as conn:
            dispatches = waves.take_outbox(conn, now=self.clock(), run_id=run_id)
        return self.send_all(dispatches)
