"""A turn's commit: all of its rows and the fence in one go, or nothing under a lost lease."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import Engine, func, select

from tests.factories import make_run
from worker.agent.events import ModelOutput, Nudge, NudgeReason
from worker.agent.timings import TurnTimer
from worker.notices import user_text
from worker.store.claims import Claim, lease_turn
from worker.store.engine import utcnow
from worker.store.sessions import load_session, next_seq
from worker.store.tables import events, sessions, turn_timings, usage
from worker.store.turns import TurnRows, commit_turn, holds_lease
from worker.store.turns import claim_turn as turns_claim

pytestmark = pytest.mark.services


def _claim(engine: Engine, session_id: int, owner: str, *, ttl_s: float = 30.0) -> Claim:
    with engine.begin() as conn:
        claim = lease_turn(
            conn, session_id=session_id, turn_no=0, owner=owner, now=utcnow(), ttl_s=ttl_s
        )
    assert claim is not None
    return claim


def _rows(engine: Engine, run_id: int, session_id: int) -> TurnRows:
    now = utcnow()
    with engine.connect() as conn:  # after the events the wave's start wrote
        first = next_seq(conn, session_id=session_id, turn_no=0)
    content = {"role": "model", "parts": [{"text": "thinking out loud"}]}
    return TurnRows(
        run_id=run_id,
        items=[ModelOutput(content, "STOP"), Nudge(NudgeReason.no_tool_call, user_text("call"))],
        first_seq=first,
        usage={
            "model": "sim",
            "prompt_tokens": 1200,
            "cached_tokens": 1000,
            "output_tokens": 40,
            "thoughts_tokens": 64,
            "tool_use_tokens": 0,
            "cost_usd": 0.00042,
            "price_date": "2026-01-01",
            "latency_ms": 812,
        },
        timing=TurnTimer().row(claimed_at=now, dispatched_at=None, dispatch_ms=None),
    )


def _written(engine: Engine, session_id: int) -> tuple[int, int, int, int]:
    with engine.connect() as conn:
        counts = [
            conn.execute(
                select(func.count()).select_from(table).where(table.c.session_id == session_id)
            ).scalar_one()
            for table in (events, usage, turn_timings)
        ]
        next_turn = conn.execute(
            select(sessions.c.next_turn).where(sessions.c.id == session_id)
        ).scalar_one()
    return (*counts, next_turn)


def test_a_turn_commits_its_events_usage_timing_and_fence_together(engine: Engine) -> None:
    # Given a turn whose lease this worker holds
    run_id, (sid,) = make_run(engine)
    claim = _claim(engine, sid, "here:1")
    before = _written(engine, sid)
    # When it commits its rows
    with engine.begin() as conn:
        assert holds_lease(conn, claim=claim)
        committed = commit_turn(
            conn, claim=claim, rows=_rows(engine, run_id, sid), now=utcnow(), fenced_at=utcnow()
        )
    # Then both events, the usage row and the timing row are there, and the turn advanced
    assert committed
    assert _written(engine, sid) == (before[0] + 2, 1, 1, 1)
    with engine.connect() as conn:
        stored = conn.execute(
            select(events.c.seq, events.c.kind, events.c.payload)
            .where(events.c.session_id == sid, events.c.seq >= before[0])
            .order_by(events.c.seq)
        ).all()
        cost = conn.execute(select(usage.c.cost_usd).where(usage.c.session_id == sid)).scalar()
        queue_ms = conn.execute(
            select(turn_timings.c.queue_ms).where(turn_timings.c.session_id == sid)
        ).scalar()
    assert [(s.seq, s.kind) for s in stored] == [(before[0], "model"), (before[0] + 1, "nudge")]
    assert stored[0].payload["content"]["parts"] == [{"text": "thinking out loud"}]
    assert cost == pytest.approx(0.00042)
    assert queue_ms is None  # a timing the turn did not take stays empty


def test_a_turn_whose_lease_moved_on_writes_nothing(engine: Engine) -> None:
    # Given a turn whose short lease lapsed and was taken by another worker
    run_id, (sid,) = make_run(engine)
    stale = _claim(engine, sid, "gone:1", ttl_s=0.001)
    before = _written(engine, sid)
    with engine.begin() as conn:
        taken = lease_turn(
            conn,
            session_id=sid,
            turn_no=0,
            owner="live:2",
            now=stale.expires_at + timedelta(seconds=1),
            ttl_s=30.0,
        )
    assert taken is not None and taken.epoch > stale.epoch
    # When the stale worker tries to commit its rows anyway
    with engine.begin() as conn:
        committed = commit_turn(
            conn, claim=stale, rows=_rows(engine, run_id, sid), now=utcnow(), fenced_at=utcnow()
        )
    # Then it was refused, and not one of its rows was written
    assert not committed
    assert _written(engine, sid) == before == (before[0], 0, 0, 0)


def test_a_claim_reads_the_session_as_a_transaction_would(engine: Engine) -> None:
    # Given a session with a committed turn behind it
    run_id, (sid,) = make_run(engine)
    first = _claim(engine, sid, "here:1")
    with engine.begin() as conn:
        commit_turn(
            conn, claim=first, rows=_rows(engine, run_id, sid), now=utcnow(), fenced_at=utcnow()
        )
    # When the next turn is claimed, and a duplicate of its task arrives meanwhile
    with engine.connect() as conn:
        claimed = turns_claim(
            conn, session_id=sid, turn_no=1, owner="here:1", now=utcnow(), ttl_s=30
        )
    with engine.connect() as conn:
        duplicate = turns_claim(
            conn, session_id=sid, turn_no=1, owner="there:2", now=utcnow(), ttl_s=30
        )
    # Then the claim took the lease and read the session, its run and its whole log,
    # exactly as the separate statements read them
    assert claimed is not None and duplicate is None
    claim, view = claimed
    assert (claim.session_id, claim.turn_no, claim.epoch) == (sid, 1, first.epoch + 1)
    with engine.connect() as conn:
        expected = load_session(conn, session_id=sid)
    assert view == expected
    assert view.next_turn == 1 and view.next_seq == 0
    assert [kind for kind, _ in view.events][-2:] == ["model", "nudge"]
