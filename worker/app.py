"""The Celery app: ``celery -A worker worker -Q sessions,verify -P threads -c 100``."""

from __future__ import annotations

import threading
from functools import cached_property
from typing import Any

from celery import Celery, bootsteps

from worker.db import make_engine
from worker.reconciler import ReconcilerThread
from worker.runtime import Runtime
from worker.settings import SESSIONS_QUEUE, VERIFY_QUEUE, Settings
from worker.store import Dispatch

#: Task that runs one turn.
TURN_TASK = "swarm.turn"
#: Task that verifies one handed-off artifact version.
VERIFY_TASK = "swarm.verify"


def celery_config(settings: Settings) -> dict[str, Any]:
    """Celery settings derived from Swarm's."""
    transport: dict[str, Any] = {}
    if settings.is_embedded:
        transport["polling_interval"] = 0.05
    elif settings.broker_url.startswith(("redis://", "rediss://")):
        # A message unacknowledged this long is delivered again; the reconciler usually
        # re-dispatches long before, so this only bounds how late a duplicate can be.
        transport["visibility_timeout"] = 3600
    return {
        "broker_url": settings.broker_url,
        "broker_transport_options": transport,
        "broker_connection_retry_on_startup": True,
        "task_ignore_result": True,
        "result_backend": None,
        "task_serializer": "json",
        "accept_content": ["json"],
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_default_queue": SESSIONS_QUEUE,
        "task_routes": {TURN_TASK: {"queue": SESSIONS_QUEUE},
                        VERIFY_TASK: {"queue": VERIFY_QUEUE}},
        "worker_send_task_events": True,
        "task_send_sent_event": True,
        "worker_cancel_long_running_tasks_on_connection_loss": True,
    }


class CeleryDispatcher:
    """Sends turn and verify tasks through a Celery app, with deterministic task ids."""

    def __init__(self, app: Celery) -> None:
        self.app = app

    def send(self, item: Dispatch, *, delay_s: float = 0.0) -> None:
        """Send one task."""
        countdown = delay_s if delay_s > 0 else None
        if item.kind == "turn":
            self.app.send_task(TURN_TASK, kwargs={"session_id": item.session_id,
                                                  "turn_no": item.number},
                               task_id=f"turn:{item.session_id}:{item.number}",
                               queue=SESSIONS_QUEUE, countdown=countdown)
        else:
            self.app.send_task(VERIFY_TASK, kwargs={"session_id": item.session_id,
                                                    "round_no": item.number},
                               task_id=f"verify:{item.session_id}:{item.number}",
                               queue=VERIFY_QUEUE, countdown=countdown)


class SwarmCelery(Celery):  # type: ignore[misc]
    """A Celery app that carries Swarm's settings and, lazily, the process runtime."""

    def __init__(self, settings: Settings | None = None) -> None:
        super().__init__("swarm", include=["worker.tasks", "verifier.tasks", "ops.metrics"])
        self._given_settings = settings
        self._runtime_lock = threading.Lock()
        self._runtime: Runtime | None = None
        # Read the environment when the app is first configured, not at import time.
        self.add_defaults(lambda: celery_config(self.settings))
        self.steps["worker"].add(ReconcilerStep)

    @cached_property
    def settings(self) -> Settings:
        """The settings given to the factory, or those of the environment."""
        return self._given_settings or Settings()

    @property
    def runtime(self) -> Runtime:
        """This process's runtime, built on first use."""
        with self._runtime_lock:
            if self._runtime is None:
                self._runtime = Runtime(settings=self.settings,
                                        engine=make_engine(self.settings),
                                        dispatcher=CeleryDispatcher(self))
            return self._runtime


class ReconcilerStep(bootsteps.StartStopStep):  # type: ignore[misc]
    """Runs the reconciler beside every worker, for as long as the worker runs."""

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self.thread: ReconcilerThread | None = None

    def start(self, worker: Any) -> None:
        app: SwarmCelery = worker.app
        self.thread = ReconcilerThread(app.runtime, app.settings.reconcile_interval_s)
        self.thread.start()

    def stop(self, worker: Any) -> None:
        if self.thread is not None:
            self.thread.stop()


def create_app(settings: Settings | None = None) -> SwarmCelery:
    """Build the Celery app; without ``settings`` they come from ``SWARM_*`` on first use."""
    return SwarmCelery(settings)


app = create_app()
