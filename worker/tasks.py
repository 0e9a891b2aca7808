"""Celery tasks of the sessions queue: thin adapters around the turn loop."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from worker.app import TURN_TASK
from worker.errors import TransientError
from worker.turn import run_turn


@shared_task(name=TURN_TASK, bind=True, max_retries=None)  # type: ignore[untyped-decorator]
def turn(self: Any, session_id: int, turn_no: int) -> str:
    """Run one turn of one session; transient model errors come back as a retry."""
    try:
        return run_turn(rt=self.app.runtime, session_id=session_id, turn_no=turn_no,
                        retries=self.request.retries).value
    except TransientError as exc:
        raise self.retry(countdown=exc.delay_s, exc=exc) from None
