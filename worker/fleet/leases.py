"""Heartbeated leases: while a worker process lives, the leases of its work in flight do too.

A turn or a verification claims its session's lease for ``lease_ttl_s``; a thread of the
process renews every lease it holds each ``lease_renew_s`` in one statement. So the TTL
can be short (a dead worker's work is taken over within seconds) while a long model call
or a slow render never loses its lease as long as its worker is alive.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from sqlalchemy import BigInteger, Engine, Integer, bindparam, func, select, tuple_, update
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.sql.dml import Update

from worker.fleet.native import sleep_thread, start_native
from worker.store.tables import sessions

logger = logging.getLogger(__name__)

_HELD = (
    func.unnest(
        bindparam("b_ids", type_=ARRAY(BigInteger)), bindparam("b_epochs", type_=ARRAY(Integer))
    )
    .table_valued("id", "epoch")
    .render_derived(name="held")
)
#: PostgreSQL's renewal: the held leases by primary key, skipping the rows another
#: transaction has locked. A turn's commit locks its session row until it commits, and
#: then lets the lease go; waiting for it would hold the rows already renewed locked in
#: turn, and at hundreds of leases a renewal queued behind one commit after another for
#: seconds, while every claim and commit queued behind the renewal.
_RENEW_PG = (
    update(sessions)
    .where(
        sessions.c.id.in_(
            select(sessions.c.id)
            .join(_HELD, (_HELD.c.id == sessions.c.id) & (_HELD.c.epoch == sessions.c.lease_epoch))
            .where(sessions.c.lease_owner == bindparam("b_owner"))
            .with_for_update(skip_locked=True, of=sessions)
            .scalar_subquery()
        )
    )
    .values(lease_expires_at=bindparam("b_expires_at", type_=sessions.c.lease_expires_at.type))
)


class LeaseKeeper:
    """Renews the leases this process holds, on a daemon thread that runs while any is held.

    Args:
        engine: Where the leases are.
        owner: This process's lease owner name.
        ttl_s: How long a renewed lease lasts.
        renew_s: How often the leases are renewed.
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
    ) -> None:
        self.engine = engine
        self.owner = owner
        self.ttl_s = ttl_s
        self.renew_s = renew_s
        self.clock = clock
        self._held: dict[int, int] = {}
        self._lock = threading.Lock()
        self._running = False
        """A renewing thread runs (it stops when nothing is held)."""
        self._stop_event = threading.Event()

    @contextmanager
    def hold(self, session_id: int, epoch: int) -> Iterator[None]:
        """Keep the lease ``(session_id, epoch)`` alive while the block runs."""
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

    def held(self) -> dict[int, int]:
        """The leases held now: session id to epoch."""
        with self._lock:
            return dict(self._held)

    def renew(self) -> int:
        """Extend every lease still held by this process; returns how many were renewed.

        On PostgreSQL a session row that another transaction holds locked is skipped, not
        waited for: that is the turn committing, which lets the lease go as it commits.
        """
        held = self.held()
        if not held:
            return 0
        expires_at = self.clock() + timedelta(seconds=self.ttl_s)
        with self.engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                result = conn.execute(
                    _RENEW_PG,
                    {
                        "b_ids": list(held),
                        "b_epochs": list(held.values()),
                        "b_owner": self.owner,
                        "b_expires_at": expires_at,
                    },
                )
            else:  # SQLite: one writer at a time, nothing to skip
                result = conn.execute(_renew_rows(held, self.owner, expires_at))
        return int(result.rowcount)

    def stop(self) -> None:
        """Stop renewing (leases then lapse on their own)."""
        self._stop_event.set()

    def _loop(self) -> None:
        while True:
            sleep_thread(self.renew_s)
            if self._stop_event.is_set():
                return
            with self._lock:
                if not self._held:
                    # Idle: the next hold starts a new thread (both decided under the lock).
                    self._running = False
                    return
            try:
                self.renew()
            except Exception:  # the database may be restarting; a lease outlives a few misses
                logger.warning("could not renew %d lease(s)", len(self.held()), exc_info=True)


def _renew_rows(held: dict[int, int], owner: str, expires_at: datetime) -> Update:
    return (
        update(sessions)
        .where(
            tuple_(sessions.c.id, sessions.c.lease_epoch).in_(list(held.items())),
            sessions.c.lease_owner == owner,
        )
        .values(lease_expires_at=expires_at)
    )
