"""A turn's claim reads only the events after its caller's mark, if the mark still holds."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, delete, insert, select, update

from tests.factories import make_run
from worker.agent.events import Feedback, ModelOutput, Nudge, NudgeReason
from worker.agent.timings import TurnTimer
from worker.notices import user_text
from worker.store.claims import Claim
from worker.store.engine import utcnow
from worker.store.eventlog import LogMark
from worker.store.sessions import SessionView, add_events, load_session
from worker.store.tables import events
from worker.store.turns import TurnRows, claim_turn, commit_turn

pytestmark = pytest.mark.services


def _claim(
    engine: Engine, sid: int, turn_no: int, since: LogMark | None = None, *, again: bool = False
) -> tuple[Claim, SessionView]:
    # Claimed again, the turn's earlier lease (30 s) has lapsed: its worker died.
    now = utcnow() + timedelta(seconds=60 if again else 0)
    with engine.connect() as conn:
        claimed = claim_turn(
            conn, session_id=sid, turn_no=turn_no, owner="here:1", now=now, ttl_s=30, since=since
        )
    assert claimed is not None
    return claimed


def _commit(engine: Engine, run_id: int, claim: Claim, view: SessionView, text: str) -> None:
    now = utcnow()
    rows = TurnRows(
        run_id=run_id,
        items=[
            ModelOutput({"role": "model", "parts": [{"text": text}]}),
            Nudge(NudgeReason.no_tool_call, user_text("call a tool")),
        ],
        first_seq=view.next_seq,
        usage={
            "model": "sim",
            "prompt_tokens": 100,
            "cached_tokens": 0,
            "output_tokens": 10,
            "thoughts_tokens": 0,
            "tool_use_tokens": 0,
            "cost_usd": 0.0,
            "price_date": "2026-01-01",
            "latency_ms": 1,
        },
        timing=TurnTimer().row(claimed_at=now, dispatched_at=None, dispatch_ms=None),
    )
    with engine.begin() as conn:
        assert commit_turn(conn, claim=claim, rows=rows, now=now, fenced_at=now)


def _whole(engine: Engine, sid: int) -> list[tuple[str, dict[str, Any]]]:
    with engine.connect() as conn:
        return load_session(conn, session_id=sid).events


def test_a_claim_reads_only_the_turns_after_the_mark(engine: Engine) -> None:
    # Given a session whose first turn was claimed without a mark and committed
    run_id, (sid,) = make_run(engine)
    claim, first = _claim(engine, sid, 0)
    _commit(engine, run_id, claim, first, "turn 0")
    # When the next turn is claimed from where the first read ended
    claim, view = _claim(engine, sid, 1, since=first.log_tail)
    # Then the first read was the whole log, and the second only the first turn's events
    assert first.log_after is None and first.events == _whole(engine, sid)[:1]
    assert view.log_after == first.log_tail
    assert [kind for kind, _ in view.events] == ["model", "nudge"]
    assert view.events[0][1]["content"]["parts"] == [{"text": "turn 0"}]
    assert first.events + view.events == _whole(engine, sid)
    assert view.log_tail is not None and (view.log_tail.turn_no, view.log_tail.seq) == (0, 2)
    assert view.next_seq == 0


def test_a_claim_with_nothing_new_keeps_the_mark(engine: Engine) -> None:
    # Given a claimed turn whose worker died before committing
    _, (sid,) = make_run(engine)
    _, first = _claim(engine, sid, 0)
    # When the turn is claimed again from that read's end
    _, again = _claim(engine, sid, 0, since=first.log_tail, again=True)
    # Then it reads no event and ends where the first read ended
    assert again.events == [] and again.log_after == first.log_tail
    assert again.log_tail == first.log_tail


def test_the_next_seq_counts_the_events_before_the_mark(engine: Engine) -> None:
    # Given a turn that reads the verifier's feedback (filed under the turn about to run)
    run_id, (sid,) = make_run(engine)
    claim, first = _claim(engine, sid, 0)
    _commit(engine, run_id, claim, first, "turn 0")
    with engine.begin() as conn:
        add_events(
            conn, session_id=sid, turn_no=1, items=[Feedback(user_text("fix it"), 0)], now=utcnow()
        )
    _, read = _claim(engine, sid, 1, since=first.log_tail)
    # When that turn is claimed again (a retry) from where its first claim's read ended
    _, retried = _claim(engine, sid, 1, since=read.log_tail, again=True)
    # Then no event is read twice, and the turn's events still go after the feedback
    assert [kind for kind, _ in read.events] == ["model", "nudge", "feedback"]
    assert retried.events == [] and retried.next_seq == read.next_seq == 1


@pytest.mark.parametrize("rewrite", ["refilled", "updated", "deleted"])
def test_a_log_rewritten_under_the_mark_is_read_whole(engine: Engine, rewrite: str) -> None:
    # Given a session read up to its first turn's last event
    run_id, (sid,) = make_run(engine)
    claim, first = _claim(engine, sid, 0)
    _commit(engine, run_id, claim, first, "turn 0")
    claim, read = _claim(engine, sid, 1, since=first.log_tail)
    assert read.log_tail is not None
    mark = read.log_tail
    # When the log is rewritten (same keys again, a payload changed in place, or cut short)
    with engine.begin() as conn:
        rows = (
            conn.execute(
                select(events)
                .where(events.c.session_id == sid)
                .order_by(events.c.turn_no, events.c.seq)
            )
            .mappings()
            .all()
        )
        if rewrite == "updated":
            conn.execute(
                update(events)
                .where(events.c.id == mark.event_id)
                .values(payload=Nudge(NudgeReason.note, user_text("rewritten")).to_payload())
            )
        else:
            conn.execute(delete(events).where(events.c.session_id == sid))
            kept = rows if rewrite == "refilled" else rows[:1]
            conn.execute(insert(events), [{k: v for k, v in r.items() if k != "id"} for r in kept])
    _, view = _claim(engine, sid, 1, since=mark, again=True)
    # Then the claim read the whole log again, as it now is
    assert view.log_after is None
    assert view.events == _whole(engine, sid)
    assert len(view.events) == (1 if rewrite == "deleted" else 3)
