"""Sending the tasks the database decided on: task names, deterministic ids, the dispatcher."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from worker.settings import SANDBOX_QUEUE, SESSIONS_QUEUE, VERIFY_QUEUE
from worker.store.due import Dispatch

#: Task that runs one turn.
TURN_TASK = "swarm.turn"
#: Task that verifies one handed-off artifact version.
VERIFY_TASK = "swarm.verify"
#: The verify queue of each kind of verifier: a host runs browsers or sandboxes where they fit.
VERIFY_QUEUES = {"chromium": VERIFY_QUEUE, "static": VERIFY_QUEUE, "python": SANDBOX_QUEUE}
#: Message priorities. kombu's Redis transport keeps a queue's messages in one list per
#: priority step (0, 3, 6, 9) and reads step 0 first: a task sent again for a session that
#: lost its worker is read before every task queued in the ordinary way.
PRIORITY = 5
TAKEOVER_PRIORITY = 0
#: Seconds within which a task sent on its own, right after the commit that made it due,
#: is on the broker. One not there twice in a row after that is lost: its sender lost the
#: broker (a restart, or a host cut off from Redis) between the commit and the send.
SENT_WITHIN_S = 5.0


class Dispatcher(Protocol):
    """Sends the tasks the database decided on."""

    def send(self, item: Dispatch, *, delay_s: float = 0.0) -> None:
        """Send one turn or verification task."""
        ...


class TaskSender(Protocol):
    """What :class:`CeleryDispatcher` needs of a Celery app."""

    def send_task(self, name: str, **options: Any) -> Any:
        """Send a task by name."""
        ...


class _Sent:
    """What ``send_task`` hands back for a task whose result nobody reads."""

    __slots__ = ("id", "ignored")

    def __init__(self, task_id: str) -> None:
        self.id = task_id
        self.ignored = True


class CeleryDispatcher:
    """Sends turn and verify tasks through a Celery app, with deterministic task ids.

    Args:
        app: The Celery app.
        own_queue: Where this process's sessions' next turns go now, if to a queue of its
            own (:func:`worker.fleet.broker.own_queue`); None for the shared queue.
    """

    def __init__(self, app: TaskSender, own_queue: Callable[[], str | None] | None = None) -> None:
        self.app = app
        self.own_queue = own_queue

    def send(self, item: Dispatch, *, delay_s: float = 0.0) -> None:
        """Send one task, ``delay_s`` or the item's own delay from now (the longer)."""
        delay_s = max(delay_s, item.delay_s)
        countdown = delay_s if delay_s > 0 else None
        if item.kind == "turn":
            name, queue, number = TURN_TASK, SESSIONS_QUEUE, "turn_no"
            # A turn that follows one this process ran: where its history is cached. A
            # first turn, or one sent again, goes to the fleet.
            if self.own_queue is not None and item.number > 0 and not item.takeover:
                queue = self.own_queue() or queue
        else:
            name, number = VERIFY_TASK, "round_no"
            queue = VERIFY_QUEUES.get(item.verifier, VERIFY_QUEUE)
        kwargs = {"session_id": item.session_id, number: item.number}
        self.app.send_task(
            name,
            kwargs=kwargs,
            task_id=item.task_id,
            queue=queue,
            countdown=countdown,
            priority=TAKEOVER_PRIORITY if item.takeover else PRIORITY,
            # What Flower shows, given: Celery's own saferepr walks them in pure Python.
            argsrepr="()",
            kwargsrepr=repr(kwargs),
            # Nobody reads a turn's result: no result backend, no AsyncResult, no trail on
            # the sending task. Each of those builds a backend object per thread (per
            # greenlet under gevent, so per task), about 5% of a busy worker's CPU.
            ignore_result=True,
            result_cls=_Sent,
            add_to_parent=False,
        )
