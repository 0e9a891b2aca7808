"""Following a run: woken by notifications, it reads the figures only when it needs them."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import Engine

from scheduler.cli import follow
from tests.factories import make_run
from worker.reads.figures import run_figures
from worker.states import Outcome
from worker.store.endings import count_endings, end_session
from worker.store.engine import notify_run, utcnow

pytestmark = pytest.mark.services

#: Notifications sent while the run goes on, each one a wake-up of the follower.
NOTIFICATIONS = 20
#: Seconds the follow may take (the run ends as soon as the notifications are sent).
FOLLOW_TIMEOUT_S = 60


def test_a_follower_not_showing_progress_reads_the_figures_once(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a run of one session, and a count of the figures the follower computes
    run_id, (sid,) = make_run(engine)
    computed: list[int] = []

    def counting(*args: Any, **kwargs: Any) -> Any:
        computed.append(run_id)
        return run_figures(*args, **kwargs)

    monkeypatch.setattr(follow, "run_figures", counting)

    def progress_then_end() -> None:
        for _ in range(NOTIFICATIONS):
            with engine.begin() as conn:
                notify_run(conn, run_id)
        with engine.begin() as conn:
            end_session(conn, session_id=sid, outcome=Outcome.verified, now=utcnow())
        count_endings(engine, now=utcnow(), session_ids=[sid])

    # When it follows the run while the run announces progress, then ends
    sender = threading.Thread(target=progress_then_end)
    sender.start()
    try:
        result = follow.until_finished(engine, run_id, show=False, timeout_s=FOLLOW_TIMEOUT_S)
    finally:
        sender.join()
    # Then it returned the ended run's figures, computed once, not at every wake-up
    assert result.sessions.succeeded == 1
    assert result.finished_at is not None
    assert computed == [run_id]
