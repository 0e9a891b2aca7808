"""Celery task of the verify queue: judge one handed-off artifact version."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from celery import shared_task

from worker.app import VERIFY_TASK
from worker.checks import passed, static_checks
from worker.verdicts import VerdictIn, load_handoff, record_verdict


@shared_task(name=VERIFY_TASK, bind=True, max_retries=None)  # type: ignore[untyped-decorator]
def verify(self: Any, session_id: int, round_no: int) -> str:
    """Judge the version a session handed off in ``round_no`` and record the verdict."""
    rt = self.app.runtime
    handoff = load_handoff(rt, session_id=session_id, round_no=round_no)
    if handoff is None:
        return "duplicate"
    started = time.monotonic()
    checks = static_checks(handoff.content, max_bytes=handoff.max_bytes)
    verdict = VerdictIn(
        passed=passed(checks),
        method="static",
        checks=[asdict(c) for c in checks],
        elapsed_ms=int((time.monotonic() - started) * 1000),
    )
    return record_verdict(rt, handoff, verdict)
