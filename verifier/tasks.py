"""Celery task of the verify queue: a thin adapter around :func:`verify_handoff`."""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery import shared_task
from celery.signals import celeryd_after_setup, worker_ready, worker_shutdown
from sqlalchemy.exc import DBAPIError

from verifier.chromium.binary import resolve_sandbox
from verifier.verify import close_browser, shared_browser, shared_sandbox, verify_handoff
from worker.celery import database_lost
from worker.errors import BrowserUnavailable, SandboxUnavailable, TransientError
from worker.fleet.dispatch import VERIFY_TASK
from worker.fleet.runtime import Runtime
from worker.settings import SANDBOX_QUEUE, VERIFY_QUEUE
from worker.store.engine import connection_lost, make_engine

logger = logging.getLogger(__name__)

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
                settings=settings,
                engine=make_engine(settings),
                dispatcher=rt.dispatcher,
                tracer=rt.tracer,
            )
        return _verify_rt


@shared_task(name=VERIFY_TASK, bind=True, max_retries=None)  # type: ignore[untyped-decorator]
def verify(self: Any, session_id: int, round_no: int) -> str:
    """Judge the version a session handed off in ``round_no`` and record the verdict."""
    rt = verify_runtime(self.app.runtime)
    try:
        return verify_handoff(
            rt,
            session_id=session_id,
            round_no=round_no,
            browser=lambda: shared_browser(rt.settings),
        )
    except TransientError as exc:
        # An infrastructure fault (the browser, the sandbox, a task this worker cannot
        # load), never the artifact's: nothing was recorded; try again.
        delay_s = min(2.0 * 2**self.request.retries, 60.0)
        what = "browser" if isinstance(exc, BrowserUnavailable) else "verifier"
        logger.warning(
            "verify %s/%s: %s unavailable (%s); retry in %.0fs",
            session_id,
            round_no,
            what,
            exc,
            delay_s,
        )
        raise self.retry(countdown=delay_s, exc=exc) from None
    except DBAPIError as exc:
        if not connection_lost(exc):
            raise
        lost = database_lost(self, f"verify {session_id}/{round_no}", exc)
        raise self.retry(countdown=lost.delay_s, exc=lost) from None


@celeryd_after_setup.connect  # type: ignore[untyped-decorator]
def _refuse_without_sandbox(instance: Any = None, **_: Any) -> None:
    """A worker of the sandbox queue starts only where the sandbox can be built.

    Untrusted code never runs unconfined: where bubblewrap cannot make its namespaces (a
    kernel or a container that refuses them), the worker stops at once, with one line.
    """
    if instance is None or SANDBOX_QUEUE not in instance.app.amqp.queues.consume_from:
        return
    if getattr(instance.pool_cls, "is_green", False):
        # A judgement waits for its sandbox's processes to end, which a green pool's loop
        # cannot wait for without stopping every other task of the worker.
        raise SystemExit(
            f"error: the {SANDBOX_QUEUE} queue runs on a worker of its own with the prefork "
            f"or threads pool (python -m worker -Q {SANDBOX_QUEUE} -c 2), not -P gevent"
        )
    try:
        shared_sandbox(instance.app.settings).probe()
    except SandboxUnavailable as exc:
        raise SystemExit(
            f"error: this worker consumes the {SANDBOX_QUEUE} queue, and the Python sandbox "
            f"cannot be built here: {exc}"
        ) from None
    logger.info("Python sandbox ready: solutions run in bubblewrap, offline and confined")


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
