"""An embedded fleet: broker, worker and reconciler inside this process, on SQLite.

Runs the same tasks and code paths as a fleet of ``celery -A worker worker`` processes,
through kombu's in-memory transport instead of Redis.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from celery import signals
from celery.worker import WorkController, state

from worker.celery import SwarmCelery
from worker.settings import QUEUES

logger = logging.getLogger(__name__)

#: Seconds to wait for the worker to consume before work is created anyway.
READY_TIMEOUT_S = 30.0
#: Seconds a warm shutdown may take before the worker thread is abandoned.
SHUTDOWN_TIMEOUT_S = 30.0


def _ready(consumer: object, ready: threading.Event) -> None:
    # Like `celery worker`, announce readiness, so that what hooks worker_ready (the
    # resource sampler) runs for the embedded worker too.
    signals.worker_ready.send(sender=consumer)
    ready.set()


@contextmanager
def embedded_worker(app: SwarmCelery, *, concurrency: int) -> Iterator[WorkController]:
    """Run a threads-pool worker consuming both queues in a background thread."""
    # Pool threads resolve tasks through Celery's default app, as `celery worker` sets it.
    app.set_current()
    app.set_default()
    ready = threading.Event()
    worker = WorkController(
        app=app,
        hostname=f"embedded@{app.runtime.owner}",
        pool_cls="threads",
        concurrency=concurrency,
        queues=list(QUEUES),
        loglevel=logging.getLogger().getEffectiveLevel(),
        without_heartbeat=True,
        without_mingle=True,
        without_gossip=True,
        task_events=False,
        ready_callback=lambda consumer: _ready(consumer, ready),
    )
    thread = threading.Thread(target=worker.start, name="swarm-embedded-worker", daemon=True)
    thread.start()
    if not ready.wait(READY_TIMEOUT_S):
        logger.warning("embedded worker not ready after %.0fs; going on", READY_TIMEOUT_S)
    try:
        yield worker
    finally:
        # A warm shutdown: the consumer stops taking messages and running turns finish.
        state.should_terminate = 0
        thread.join(SHUTDOWN_TIMEOUT_S)
        state.should_terminate = None
        if thread.is_alive():
            logger.warning("embedded worker did not stop within %.0fs", SHUTDOWN_TIMEOUT_S)
