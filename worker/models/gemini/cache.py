"""Explicit context caches: one per run, created by its first turn, deleted when it ends.

The cache holds the run's stable prefix (system instruction, tools, tool config), which is
byte-identical across the run's sessions; requests then name the cache instead of sending
the prefix. The database records each cache, so every worker uses the same one and a
reconciler pass deletes it once the run has ended. Only the Gemini provider knows of it:
the turn loop sends the same request either way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from sqlalchemy import Engine, insert, select, update
from sqlalchemy.engine import Connection

from worker.errors import SwarmError
from worker.models.base import ModelRequest, prompt_tokens_bound
from worker.models.pricing import PriceTable
from worker.settings import CACHE_EXPIRY_MARGIN_S
from worker.store import reservations
from worker.store.tables import caches, runs

if TYPE_CHECKING:
    # Only a type here: the provider (and google-genai) loads when a Gemini model is used.
    from worker.models.gemini.client import CachedPrefix

logger = logging.getLogger(__name__)

#: A cache this close to its expiry is treated as gone: a request naming it could outlive it.
EXPIRY_MARGIN_S = CACHE_EXPIRY_MARGIN_S


class RunCache:
    """The explicit cache of one run's prefix, shared by every session of the run.

    Args:
        engine: Where caches are recorded.
        run_id: The run.
        create: Caches a request's prefix at the provider.
        clock: The current time (UTC).
        prices: Prices of the cache's storage: with them, a run with a budget pays for its
            cache through the budget's ledger (None: the cache is not counted there).
        ttl_s: How long the provider is asked to keep a cache.
    """

    def __init__(
        self,
        *,
        engine: Engine,
        run_id: int,
        create: Callable[[ModelRequest, str], CachedPrefix],
        clock: Callable[[], datetime],
        prices: PriceTable | None = None,
        ttl_s: float | None = None,
    ) -> None:
        self.engine = engine
        self.run_id = run_id
        self.create = create
        self.clock = clock
        self.prices = prices
        self.ttl_s = ttl_s

    def name_for(self, request: ModelRequest) -> str | None:
        """The name of the run's cache, created at the provider by the first turn that asks.

        A cache the provider keeps no longer than the expiry margin could never be named
        safely: it is recorded (it is billed), no request names it, and the run sends its
        prefix with every request from then on, rather than make one cache a turn. Expiry is
        kept in this clock: the cache's lifetime by the provider's clock, from now, so a
        skewed clock does not shorten it.

        Returns:
            The cache's name, or None when the run's prefix goes with each request.

        Raises:
            ModelUnavailable: the provider failed for now (the turn is retried).
            ModelFatal: the provider refused to cache the prefix.
        """
        with self.engine.connect() as conn:
            name = _live(conn, self.run_id, self.clock())
            if name is None and _too_short(conn, self.run_id):
                return None
        if name is not None:
            return name
        with self.engine.begin() as conn:
            # The run's row lock makes the first turns of a run, and the turns that find
            # its cache expired, wait for one creation.
            conn.execute(select(runs.c.id).where(runs.c.id == self.run_id).with_for_update())
            now = self.clock()
            name = _live(conn, self.run_id, now)
            if name is not None:
                return name
            if _too_short(conn, self.run_id):
                return None
            if not self._fits(conn, request):
                return None
            created = self.create(request, f"swarm run {self.run_id}")
            lifetime_s = created.lifetime_s
            expires_at = (
                now + timedelta(seconds=lifetime_s)
                if lifetime_s is not None
                else created.expires_at
            )
            self._spend(conn, request.model, created.tokens, now=now, expires_at=expires_at)
            values = {
                "model": request.model,
                "name": created.name,
                "tokens": created.tokens,
                "created_at": now,
                "expires_at": expires_at,
                "deleted_at": None,
            }
            # A cache made again after the last one expired or vanished gets a row of its
            # own: the storage of every cache the run paid for is counted.
            conn.execute(insert(caches).values(run_id=self.run_id, **values))
        if expires_at is not None and expires_at <= now + timedelta(seconds=EXPIRY_MARGIN_S):
            logger.warning(
                "run %s: cache %s lives %s, within the %.0f s margin: the run sends its prefix "
                "with each request instead",
                self.run_id,
                created.name,
                "past its expiry"
                if expires_at <= now
                else f"{(expires_at - now).total_seconds():.0f} s",
                EXPIRY_MARGIN_S,
            )
            return None
        logger.info(
            "run %s: cached its prefix as %s (%d tokens)", self.run_id, created.name, created.tokens
        )
        return created.name

    def _fits(self, conn: Connection, request: ModelRequest) -> bool:
        """Whether a budgeted run can pay for a cache of the prefix for its whole lifetime.

        Storage is billed like a call, so it goes through the budget's ledger: the cache's
        worst case (the prefix's upper-bound token count, kept for ``ttl_s``) must fit in
        what is neither spent nor held by calls in flight. The run's row is locked here.
        """
        if self.prices is None or self.ttl_s is None:
            return True
        prefix = replace(request, history=())
        worst_usd = self.prices.storage_usd(
            request.model, tokens=prompt_tokens_bound(prefix), hours=self.ttl_s / 3600
        )
        if reservations.has_room(conn, run_id=self.run_id, amount_usd=worst_usd):
            return True
        logger.info(
            "run %s: no cache of its prefix, whose storage of up to $%.4f does not fit in its "
            "budget: the run sends its prefix with each request",
            self.run_id,
            worst_usd,
        )
        return False

    def _spend(
        self,
        conn: Connection,
        model: str,
        tokens: int,
        *,
        now: datetime,
        expires_at: datetime | None,
    ) -> None:
        """Count the new cache's storage for its lifetime as spent by its budgeted run."""
        if self.prices is None or self.ttl_s is None:
            return
        lifetime_s = (expires_at - now).total_seconds() if expires_at is not None else self.ttl_s
        cost_usd = self.prices.storage_usd(model, tokens=tokens, hours=lifetime_s / 3600)
        reservations.add_spent(conn, run_id=self.run_id, cost_usd=cost_usd)

    def forget(self, name: str) -> None:
        """Record that the provider no longer has cache ``name`` (it answered "not found").

        The next :meth:`name_for` creates the run's cache again. Sessions that find the
        same cache gone at once mark the same row, so only one of them creates another.
        """
        with self.engine.begin() as conn:
            conn.execute(
                update(caches)
                .where(
                    caches.c.run_id == self.run_id,
                    caches.c.name == name,
                    caches.c.deleted_at.is_(None),
                )
                .values(deleted_at=self.clock())
            )


def _live(conn: Connection, run_id: int, now: datetime) -> str | None:
    """The run's cache that is neither deleted nor about to expire."""
    fresh = now + timedelta(seconds=EXPIRY_MARGIN_S)
    return conn.execute(
        select(caches.c.name)
        .where(
            caches.c.run_id == run_id,
            caches.c.deleted_at.is_(None),
            (caches.c.expires_at.is_(None)) | (caches.c.expires_at > fresh),
        )
        .order_by(caches.c.id.desc())
    ).scalar()


def _too_short(conn: Connection, run_id: int) -> bool:
    """True when the run's last cache was made to live no longer than the margin."""
    last = conn.execute(
        select(caches.c.created_at, caches.c.expires_at)
        .where(caches.c.run_id == run_id)
        .order_by(caches.c.id.desc())
        .limit(1)
    ).first()
    if last is None or last.expires_at is None:
        return False
    return bool((last.expires_at - last.created_at).total_seconds() <= EXPIRY_MARGIN_S)


def drop_ended(engine: Engine, *, delete: Callable[[str], None], now: datetime) -> int:
    """Delete the caches of runs that have ended; returns how many were deleted.

    A cache the provider cannot delete now expires on its own (``cache_ttl_s``).
    """
    with engine.begin() as conn:
        ended = select(runs.c.id).where(runs.c.finished_at.is_not(None))
        # Claimed by UPDATE ... RETURNING: two reconcilers never delete the same cache.
        names = conn.execute(
            update(caches)
            .where(caches.c.deleted_at.is_(None), caches.c.run_id.in_(ended))
            .values(deleted_at=now)
            .returning(caches.c.run_id, caches.c.name)
        ).all()
    for run_id, name in names:
        try:
            delete(name)
        except SwarmError as exc:
            logger.warning(
                "run %s: could not delete cache %s (%s); it expires on its own", run_id, name, exc
            )
    return len(names)
