"""Ending sessions: the wave barrier says which ending closed the wave, and a verdict's
claim reads what was handed off in the same statement."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sqlalchemy import Engine, select

from tests.factories import call as tool_call
from tests.factories import make_run, model_turn, page, run_script
from worker.fleet.runtime import Runtime
from worker.runs.verdicts import claim_handoff, load_handoff
from worker.states import Outcome
from worker.store.endings import end_session
from worker.store.engine import utcnow
from worker.store.tables import outbox
from worker.store.waves import take_outbox

pytestmark = pytest.mark.services


def test_only_the_last_ending_of_a_wave_closes_it(engine: Engine) -> None:
    # Given a run of two waves of two sessions
    run_id, ids = make_run(engine, waves="2x2")
    first, second = ids[:2]
    # When the sessions of wave 1 end one after the other
    with engine.begin() as conn:
        one = end_session(conn, session_id=first, outcome=Outcome.verified, now=utcnow())
    with engine.begin() as conn:
        two = end_session(conn, session_id=second, outcome=Outcome.verified, now=utcnow())
        again = end_session(conn, session_id=second, outcome=Outcome.verified, now=utcnow())
    # Then only the last closed the wave, and its ending queued the start of wave 2
    assert one is not None and not one.wave_closed
    assert two is not None and two.wave_closed
    assert again is None  # an ending is recorded once
    with engine.connect() as conn:
        keys = conn.execute(select(outbox.c.key).where(outbox.c.run_id == run_id)).scalars()
        assert f"run:{run_id}:wave:2" in set(keys)
    with engine.begin() as conn:
        started = take_outbox(conn, now=utcnow(), run_id=run_id)
    assert sorted(d.session_id for d in started) == sorted(ids[2:])


def test_a_verdict_claim_reads_the_handoff_once_and_only_once(runtime: Runtime) -> None:
    # Given a session that handed off its page
    _, (sid,) = make_run(runtime.engine)
    outcomes = run_script(
        runtime,
        sid,
        [
            model_turn(
                tool_call("manage_artifact", action="create", name="a.html", content=page())
            ),
            model_turn(tool_call("handoff", summary="a dashboard", artifact_name="a.html")),
        ],
    )
    assert outcomes == ["committed", "committed"]
    # When a verify worker claims it, and a duplicate task tries to claim it too
    claimed = claim_handoff(runtime, session_id=sid, round_no=0)
    duplicate = claim_handoff(runtime, session_id=sid, round_no=0)
    # Then the claim holds the lease and the very version handed off; the duplicate gets none
    assert claimed is not None and duplicate is None
    expected = load_handoff(runtime, session_id=sid, round_no=0)
    assert expected is not None
    assert claimed.epoch is not None
    assert claimed == replace(expected, epoch=claimed.epoch)
    assert claimed.content == page()
