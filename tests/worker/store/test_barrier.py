"""Ending sessions: the wave barrier says which ending closed the wave, and a verdict's
claim reads what was handed off in the same statement."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.exc import OperationalError

from tests.factories import call as tool_call
from tests.factories import make_run, model_turn, page, run_script
from worker.fleet.runtime import Runtime
from worker.runs.verdicts import claim_handoff, load_handoff
from worker.states import Outcome
from worker.store import endings
from worker.store.endings import count_endings, end_session
from worker.store.engine import utcnow
from worker.store.tables import outbox, waves
from worker.store.waves import take_outbox

pytestmark = pytest.mark.services

#: Longest wait for a thread of these tests to reach or leave a held count.
RELEASE_TIMEOUT_S = 30.0


def _done_count(engine: Engine, wave_index: int, run_id: int) -> tuple[int, str]:
    with engine.connect() as conn:
        row = conn.execute(
            select(waves.c.done_count, waves.c.status).where(
                waves.c.run_id == run_id, waves.c.index == wave_index
            )
        ).one()
    return int(row.done_count), str(row.status)


def test_only_the_last_ending_of_a_wave_closes_it(engine: Engine) -> None:
    # Given a run of two waves of two sessions
    run_id, ids = make_run(engine, waves="2x2")
    first, second = ids[:2]
    # When the sessions of wave 1 end one after the other, each counted once it committed
    # (the second twice over)
    with engine.begin() as conn:
        one = end_session(conn, session_id=first, outcome=Outcome.verified, now=utcnow())
    assert _done_count(engine, 1, run_id) == (0, "running")  # not counted before its count
    closed_by_one = count_endings(engine, now=utcnow(), session_ids=[first])
    with engine.begin() as conn:
        two = end_session(conn, session_id=second, outcome=Outcome.verified, now=utcnow())
        again = end_session(conn, session_id=second, outcome=Outcome.verified, now=utcnow())
    closed_by_two = count_endings(engine, now=utcnow(), session_ids=[second])
    closed_again = count_endings(engine, now=utcnow(), session_ids=[first, second])
    # Then only the last closed the wave, each was counted once, and the last one's count
    # queued the start of wave 2
    assert one is not None and two is not None
    assert again is None  # an ending is recorded once
    assert (closed_by_one, closed_by_two, closed_again) == (False, True, False)
    assert _done_count(engine, 1, run_id) == (2, "finished")
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


def test_endings_counted_at_once_count_each_once_and_close_the_wave_once(
    engine: Engine,
) -> None:
    # Given a wave of 24 sessions that all end, their commits done
    run_id, ids = make_run(engine, waves="2x24")
    wave = ids[:24]
    with engine.begin() as conn:
        for sid in wave:
            assert end_session(conn, session_id=sid, outcome=Outcome.verified, now=utcnow())
    # When each is counted by a thread of its own, all at once, and some twice
    start = threading.Barrier(len(wave))
    closed: list[bool] = []

    def count(sid: int) -> None:
        start.wait()
        closed.append(count_endings(engine, now=utcnow(), session_ids=[sid, wave[0]]))

    threads = [threading.Thread(target=count, args=(sid,)) for sid in wave]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Then every ending counted once, and exactly one count closed the wave and queued the
    # next one's start, once
    assert _done_count(engine, 1, run_id) == (24, "finished")
    assert closed.count(True) == 1
    with engine.connect() as conn:
        keys = list(conn.execute(select(outbox.c.key).where(outbox.c.run_id == run_id)).scalars())
    assert keys.count(f"run:{run_id}:wave:2") == 1


def _ended_wave(engine: Engine, size: int) -> tuple[int, list[int]]:
    """A run of two waves of ``size``, every session of the first ended, none counted."""
    run_id, ids = make_run(engine, waves=f"2x{size}")
    with engine.begin() as conn:
        for sid in ids[:size]:
            assert end_session(conn, session_id=sid, outcome=Outcome.verified, now=utcnow())
    return run_id, ids[:size]


def test_endings_that_come_while_a_count_runs_are_counted_together_by_it(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a wave of eight ended sessions, and a count of the first held in its statement
    run_id, wave = _ended_wave(runtime.engine, 8)
    counted = endings.count_endings
    calls: list[list[int]] = []
    inside, release = threading.Event(), threading.Event()

    def held(engine: Engine, **kwargs: Any) -> bool:
        calls.append(list(kwargs["session_ids"]))
        if len(calls) == 1:
            inside.set()
            assert release.wait(RELEASE_TIMEOUT_S)
        return counted(engine, **kwargs)

    monkeypatch.setattr(endings, "count_endings", held)
    first = threading.Thread(target=runtime.count_endings, args=([wave[0]],))
    first.start()
    assert inside.wait(RELEASE_TIMEOUT_S)
    # When the seven others end while it runs, each from a turn of its own
    for sid in wave[1:]:
        runtime.count_endings([sid])
    # Then each left its ending to the count under way and returned at once
    assert calls == [[wave[0]]]
    assert _done_count(runtime.engine, 1, run_id) == (0, "running")
    # And once that count's statement returns, it counts all seven in one more, and the
    # wave closes once
    release.set()
    first.join(RELEASE_TIMEOUT_S)
    assert calls == [[wave[0]], sorted(wave[1:])]
    assert _done_count(runtime.engine, 1, run_id) == (8, "finished")


def test_endings_a_count_failed_to_record_are_counted_by_the_next(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a wave of two ended sessions, and a database that fails the first count
    run_id, wave = _ended_wave(runtime.engine, 2)
    counted = endings.count_endings
    calls: list[list[int]] = []

    def failing_once(engine: Engine, **kwargs: Any) -> bool:
        calls.append(list(kwargs["session_ids"]))
        if len(calls) == 1:
            raise OperationalError("count", {}, Exception("the server closed the connection"))
        return counted(engine, **kwargs)

    monkeypatch.setattr(endings, "count_endings", failing_once)
    # When the first ending's count fails, and the second session ends
    with pytest.raises(OperationalError):
        runtime.count_endings([wave[0]])
    runtime.count_endings([wave[1]])
    # Then the second count counts both, and the wave closes
    assert calls == [[wave[0]], sorted(wave)]
    assert _done_count(runtime.engine, 1, run_id) == (2, "finished")
