"""What a worker process holds: settings, the engine, prices, models and a way to send tasks."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property

from sqlalchemy import Engine

from worker.fleet.dispatch import Dispatcher
from worker.fleet.leases import LeaseKeeper
from worker.models.pricing import PriceTable
from worker.models.registry import Providers
from worker.settings import Settings
from worker.store import lifecycle
from worker.store.engine import utcnow

logger = logging.getLogger(__name__)


@dataclass
class Runtime:
    """Dependencies of the turn loop and the verdict path, built once per process."""

    settings: Settings
    engine: Engine
    dispatcher: Dispatcher
    prices: PriceTable = field(default=None)  # type: ignore[assignment]
    """Defaults to the built-in table with the settings' price file on top."""
    owner: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    clock: Callable[[], datetime] = utcnow

    def __post_init__(self) -> None:
        if self.prices is None:
            self.prices = PriceTable.load(self.settings.prices_file)

    @cached_property
    def leases(self) -> LeaseKeeper:
        """Renews the leases of this process's work in flight."""
        return LeaseKeeper(
            engine=self.engine,
            owner=self.owner,
            ttl_s=self.settings.lease_ttl_s,
            renew_s=self.settings.lease_renew_s,
            clock=self.clock,
        )

    @cached_property
    def providers(self) -> Providers:
        """The process's model clients, shared by every turn."""
        return Providers(self.settings, engine=self.engine)

    def send_all(self, items: Iterable[lifecycle.Dispatch]) -> int:
        """Send tasks after their transaction committed; a lost send is the reconciler's."""
        sent = 0
        for item in items:
            try:
                self.dispatcher.send(item)
                sent += 1
            except Exception:  # the broker may be down; the database still says it is due
                logger.warning(
                    "could not send %s %s/%s; the reconciler will",
                    item.kind,
                    item.session_id,
                    item.number,
                    exc_info=True,
                )
        return sent

    def flush_outbox(self, run_id: int | None = None) -> int:
        """Start the waves the database says are due, and send their first turns."""
        with self.engine.begin() as conn:
            dispatches = lifecycle.take_outbox(conn, now=self.clock(), run_id=run_id)
        return self.send_all(dispatches)
