"""Celery tasks of the sessions queue: thin adapters around the turn loop."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from worker.app import TURN_TASK
from worker.errors import TransientError
from worker.turn import run_turn


@shared_task(name=TURN_TASK, bind=True, max_retries=None)  # type: ignore[untyped-decorator]
def turn(self: Any, session_id: int, turn_no: int, retries: int = 0) -> str:
    """Run one turn of one session; transient model errors come back as a retry.

    ``retries`` counts the retries that used up the turn's allowance (a wait for the
    fleet's limiter does not), so it is passed along rather than taken from Celery.
    """
    try:
        return run_turn(rt=self.app.runtime, session_id=session_id, turn_no=turn_no,
                        retries=retries).value
    except TransientError as exc:
        kwargs = {"session_id": session_id, "turn_no": turn_no,
                  "retries": retries + (1 if exc.counts else 0)}
        raise self.retry(args=(), kwargs=kwargs, countdown=exc.delay_s, exc=exc) from None
