"""Celery task of the verify queue: a thin adapter around :func:`verify_handoff`."""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery import shared_task
from celery.signals import worker_ready, worker_shutdown

from verifier.chromium.binary import resolve_sandbox
from verifier.verify import close_browser, shared_browser, verify_handoff
from worker.errors import BrowserUnavailable
from worker.fleet.dispatch import VERIFY_TASK
from worker.fleet.runtime import Runtime
from worker.settings import VERIFY_QUEUE
from worker.store.engine import make_engine

logger = logging.getLogger(__name__)

#: Retries of a verification whose measurement the machine's load made meaningless.
MAX_STARVED_RETRIES = 5

_lock = threading.Lock()
_verify_rt: Runtime | None = None


def verify_runtime(rt: Runtime) -> Runtime:
    """The runtime verifications run on: the process's own, or one on the verify role.

    With ``SWARM_VERIFY_DATABASE_URL`` set beside another ``SWARM_DATABASE_URL`` (a process
    consuming both queues), verifications claim, judge and record through the verify
    role's least-privileged connection, and the rest of the process keeps its own.
    """
    global _verify_rt
    url = rt.settings.verify_database_url
    if not url or url == rt.settings.database_url:
        return rt
    with _lock:
        if _verify_rt is None:
            settings = rt.settings.model_copy(update={"database_url": url})
            _verify_rt = Runtime(
                settings=settings, engine=make_engine(settings), dispatcher=rt.dispatcher
            )
        return _verify_rt


@shared_task(name=VERIFY_TASK, bind=True, max_retries=None)  # type: ignore[untyped-decorator]
def verify(self: Any, session_id: int, round_no: int) -> str:
    """Judge the version a session handed off in ``round_no`` and record the verdict."""
    rt = verify_runtime(self.app.runtime)
    try:
        # A starved renderer is retried a few times; after that the page is judged as is.
        return verify_handoff(
            rt,
            session_id=session_id,
            round_no=round_no,
            browser=shared_browser(rt.settings),
            retry_starved=self.request.retries < MAX_STARVED_RETRIES,
        )
    except BrowserUnavailable as exc:
        # An infrastructure fault, never the artifact's: nothing was recorded; try again.
        delay_s = min(2.0 * 2**self.request.retries, 60.0)
        logger.warning(
            "verify %s/%s: browser unavailable (%s); retry in %.0fs",
            session_id,
            round_no,
            exc,
            delay_s,
        )
        raise self.retry(countdown=delay_s, exc=exc) from None


@worker_ready.connect  # type: ignore[untyped-decorator]
def _say_how_pages_render(sender: Any = None, **_: Any) -> None:
    """A verify worker says at start-up whether Chromium can sandbox the pages it renders."""
    if sender is None or VERIFY_QUEUE not in sender.app.amqp.queues.consume_from:
        return
    if sender.app.settings.verifier == "static":
        return
    # The warning, where Chromium cannot sandbox, is logged once, here rather than with
    # the first page.
    if resolve_sandbox(None):
        logger.info("Chromium renders artifacts in its sandbox")


@worker_shutdown.connect  # type: ignore[untyped-decorator]
def _close_browser(**_: Any) -> None:
    close_browser()
