"""Recording a verdict: the verification row, and what it does to its session.

The verify task records a verdict after its own claim (:mod:`worker.runs.verdicts`); a
handoff judged by static checks alone is recorded by its turn, in the turn's own commit.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import insert
from sqlalchemy.engine import Connection

from worker.agent.events import Feedback
from worker.fleet.runtime import Runtime
from worker.notices import feedback_text, user_text
from worker.states import Outcome
from worker.store import due, endings
from worker.store.sessions import add_events
from worker.store.tables import verifications

__all__ = ["Applied", "VerdictIn", "after_verdict", "apply_verdict"]

logger = logging.getLogger(__name__)

_ADD_VERIFICATION = insert(verifications)


@dataclass(frozen=True)
class VerdictIn:
    """A verdict to record."""

    passed: bool
    method: str
    """``static`` or ``browser``."""
    checks: list[dict[str, Any]]
    fps: float | None = None
    screenshot_png: bytes | None = None
    elapsed_ms: int = 0
    video_mp4: bytes | None = None


@dataclass(frozen=True)
class Applied:
    """What a recorded verdict did to its session, for the caller to act on after the commit."""

    result: str
    """``succeeded``, ``repair`` or ``failed``."""
    nxt: due.Dispatch | None = None
    """The repair round's first turn, to send."""
    ended: endings.SessionEnd | None = None
    """The session's ending, if the verdict ended it."""


def apply_verdict(
    conn: Connection,
    *,
    session_id: int,
    round_no: int,
    version_id: int,
    verdict: VerdictIn,
    now: datetime,
    next_turn: int,
    repair_rounds: int,
) -> Applied:
    """Store the verdict on a session waiting on it (row-locked by the caller's transaction)
    and move the session on: it ends, or goes back to work on its next repair round."""
    conn.execute(
        _ADD_VERIFICATION,
        {
            "session_id": session_id,
            "artifact_version_id": version_id,
            "round": round_no,
            "passed": verdict.passed,
            "method": verdict.method,
            "checks": verdict.checks,
            "fps": verdict.fps,
            "screenshot_png": verdict.screenshot_png,
            "elapsed_ms": verdict.elapsed_ms,
            "video_mp4": verdict.video_mp4,
            "created_at": now,
        },
    )
    if verdict.passed:
        ended = endings.end_session(conn, session_id=session_id, outcome=Outcome.verified, now=now)
        return Applied("succeeded", ended=ended)
    if round_no < repair_rounds:
        endings.start_repair(conn, session_id=session_id, repair_round=round_no + 1, now=now)
        text = feedback_text(verdict.checks, round_no=round_no, rounds=repair_rounds)
        add_events(
            conn,
            session_id=session_id,
            turn_no=next_turn,
            items=[Feedback(user_text(text), round_no)],
            now=now,
        )
        return Applied("repair", nxt=due.Dispatch(session_id, "turn", next_turn))
    failed = ", ".join(c["name"] for c in verdict.checks if not c.get("passed"))
    ended = endings.end_session(
        conn,
        session_id=session_id,
        outcome=Outcome.failed_verification,
        now=now,
        error=f"verification failed after {repair_rounds} repair rounds: {failed}",
    )
    return Applied("failed", ended=ended)


def after_verdict(rt: Runtime, *, session_id: int, round_no: int, applied: Applied) -> str:
    """Once the verdict committed: send the repair round's first turn, or start what the
    session's ending made due (the next wave, or the next run of a ladder)."""
    logger.info("session %s verdict round %s: %s", session_id, round_no, applied.result)
    if applied.nxt is not None:
        rt.send_all([applied.nxt])
    elif applied.ended is not None:
        rt.count_endings([session_id])
    return applied.result
