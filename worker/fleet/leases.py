"""Heartbeated leases: while a worker process lives, the leases of its work in flight do too.

A turn or a verification claims its session's lease for ``lease_ttl_s``; a thread of the
process renews, every ``lease_renew_s``, the process's one row of ``lease_holders`` (its
owner name, alive until ``lease_ttl_s`` from now), and a lease whose own expiry passed is
still held while that row is alive (:mod:`worker.store.claims`). So the TTL can be short (a
dead worker's work is taken over within seconds) while a long model call or a slow render
never loses its lease as long as its worker is alive, and a renewal writes one row however
many leases are held.

A lease the process stopped holding must not live on with the process: on the renewal
after, its owner is cleared unless a commit gave it back already (a turn that failed, a
verdict that could not be recorded), and it lapses at its own expiry as a dead worker's
would.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from sqlalchemy import (
    BigInteger,
    Engine,
    Executable,
    Integer,
    Table,
    bindparam,
    func,
    select,
    tuple_,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.sql.dml import Update

from worker.fleet.native import sleep_thread, start_native
from worker.store.tables import lease_holders, sessions

logger = logging.getLogger(__name__)


def _alive(insert: Callable[[Table], postgresql.Insert | sqlite.Insert]) -> Executable:
    statement = insert(lease_holders).values(
        owner=bindparam("b_owner"), alive_until=bindparam("b_alive_until")
    )
    return statement.on_conflict_do_update(
        index_elements=[lease_holders.c.owner],
        set_={"alive_until": statement.excluded.alive_until},
    )


#: The renewal: this process's row of ``lease_holders``, alive for one more TTL.
_ALIVE = {"postgresql": _alive(postgresql.insert), "sqlite": _alive(sqlite.insert)}

_DROPPED = (
    func.unnest(
        bindparam("b_ids", type_=ARRAY(BigInteger)), bindparam("b_epochs", type_=ARRAY(Integer))
    )
    .table_valued("id", "epoch")
    .render_derived(name="dropped")
)
#: PostgreSQL's letting go of the leases this process stopped holding without a commit (a
#: committed turn gave its lease back: it has no expiry and is not written again).
_LET_GO_PG = (
    update(sessions)
    .where(
        sessions.c.id.in_(
            select(sessions.c.id).join(
                _DROPPED,
                (_DROPPED.c.id == sessions.c.id) & (_DROPPED.c.epoch == sessions.c.lease_epoch),
            )
        ),
        sessions.c.lease_owner == bindparam("b_owner"),
        sessions.c.lease_expires_at.is_not(None),
    )
    .values(lease_owner=None)
)


class LeaseKeeper:
    """Keeps this process's leases alive, on a daemon thread that runs while any is held.

    Args:
        engine: Where the leases are.
        own_engine: The engine is the keeper's alone: its connection is closed while
            nothing is held.
        owner: This process's lease owner name.
        ttl_s: How long a renewal keeps the process's leases alive.
        renew_s: How often they are renewed.
        clock: The current time (UTC).
    """

    def __init__(
        self,
        *,
        engine: Engine,
        owner: str,
        ttl_s: float,
        renew_s: float,
        clock: Callable[[], datetime],
        own_engine: bool = False,
    ) -> None:
        self.engine = engine
        self.own_engine = own_engine
        self.owner = owner
        self.ttl_s = ttl_s
        self.renew_s = renew_s
        self.clock = clock
        self._held: dict[int, int] = {}
        self._dropped: dict[tuple[int, int], None] = {}
        """Leases no longer held whose owner the next renewal clears (ordered, no repeats)."""
        self._lock = threading.Lock()
        self._running = False
        """A renewing thread runs (it stops when nothing is held or left to let go)."""
        self._stop_event = threading.Event()

    @contextmanager
    def hold(self, session_id: int, epoch: int) -> Iterator[None]:
        """Keep the lease ``(session_id, epoch)`` alive while the block runs, and let go of
        it on the next renewal after (a block that committed gave it back already)."""
        with self._lock:
            self._held[session_id] = epoch
            if not self._running:
                self._running = True
                start_native(self._loop, name="swarm-leases")
        try:
            yield
        finally:
            with self._lock:
                if self._held.get(session_id) == epoch:
                    del self._held[session_id]
                self._dropped[(session_id, epoch)] = None

    def held(self) -> dict[int, int]:
        """The leases held now: session id to epoch."""
        with self._lock:
            return dict(self._held)

    def renew(self) -> int:
        """Keep every lease still held alive for one more TTL, then let go of those no
        longer held; returns how many are held.

        The renewal writes this process's one row of ``lease_holders``, never a session
        row: it waits for no commit. Letting go waits only for the rows it clears.
        """
        with self._lock:
            held = len(self._held)
            dropped = list(self._dropped)
        if held:
            alive_until = self.clock() + timedelta(seconds=self.ttl_s)
            with self.engine.begin() as conn:
                conn.execute(
                    _ALIVE[conn.dialect.name], {"b_owner": self.owner, "b_alive_until": alive_until}
                )
        if dropped:
            with self.engine.begin() as conn:
                if conn.dialect.name == "postgresql":
                    ids, epochs = zip(*dropped, strict=True)
                    conn.execute(
                        _LET_GO_PG,
                        {"b_ids": list(ids), "b_epochs": list(epochs), "b_owner": self.owner},
                    )
                else:  # SQLite: a short list, one writer at a time
                    conn.execute(_let_go_rows(dropped, self.owner))
            with self._lock:
                for lease in dropped:
                    self._dropped.pop(lease, None)
        return held

    def stop(self) -> None:
        """Stop renewing (leases then lapse on their own)."""
        self._stop_event.set()

    def _loop(self) -> None:
        while True:
            sleep_thread(self.renew_s)
            if self._stop_event.is_set():
                return
            with self._lock:
                if not self._held and not self._dropped:
                    # Idle: the next hold starts a new thread (both decided under the lock).
                    self._running = False
                    if self.own_engine:
                        self.engine.dispose()
                    return
            try:
                self.renew()
            except Exception:  # the database may be restarting; a lease outlives a few misses
                logger.warning("could not renew %d lease(s)", len(self.held()), exc_info=True)


def _let_go_rows(dropped: list[tuple[int, int]], owner: str) -> Update:
    return (
        update(sessions)
        .where(
            tuple_(sessions.c.id, sessions.c.lease_epoch).in_(dropped),
            sessions.c.lease_owner == owner,
            sessions.c.lease_expires_at.is_not(None),
        )
        .values(lease_owner=None)
    )
