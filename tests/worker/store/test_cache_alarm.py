"""The cache-share alarm: the turn a run's share fell, and only a real fall."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, delete, insert, select

from tests.factories import add_usage, make_run
from worker.store.cache_alarm import (
    MIN_HISTORY,
    SETTLE_S,
    WINDOW,
    CacheWatch,
    UsageRow,
    cache_alarm,
    check_run,
    find_drop,
)
from worker.store.engine import utcnow
from worker.store.tables import usage

AT = datetime(2026, 12, 1, tzinfo=UTC)


def _rows(shares: list[float]) -> list[UsageRow]:
    return [UsageRow(i % 4, i // 4, 10_000, int(10_000 * s), AT) for i, s in enumerate(shares)]


def test_a_steady_share_raises_nothing() -> None:
    # first turns of a cold wave (0 %) then a steady 90 %, with some noise
    shares = [0.0] * 4 + [0.9, 0.85, 0.95, 0.8] * 15
    assert find_drop(_rows(shares)) is None


def test_a_fall_is_found_at_the_turn_it_started() -> None:
    # Given 30 turns at about 90 %, then every turn served nothing from cache
    shares = [0.9] * 30 + [0.1] * 12
    alarm = find_drop(_rows(shares))
    # Then the alarm names turn 31, raised once the window had fallen below half
    assert alarm is not None
    assert alarm.turn == 31 and (alarm.session_index, alarm.turn_no) == (30 % 4, 30 // 4)
    assert alarm.running_share == 0.9
    assert alarm.window_share < 0.45
    assert 31 <= alarm.raised_at_turn <= 30 + WINDOW
    assert "starting at turn 31" in alarm.describe()


def test_too_short_a_history_raises_nothing() -> None:
    shares = [0.9] * (MIN_HISTORY - 1) + [0.0] * WINDOW
    assert find_drop(_rows(shares)) is None


def _wave(engine: Engine, run_id: int, ids: list[int], *, cold: bool) -> None:
    """Turns 0 to 3 of each session in lockstep: turn 2's prompt is mostly a new artifact."""
    prompts = [1_000, 1_200, 6_000, 6_300]
    for turn in range(4):
        for session_id in ids:
            sent = prompts[turn - 1] if turn else 0
            add_usage(
                engine,
                run_id=run_id,
                session_id=session_id,
                turn_no=turn,
                prompt_tokens=prompts[turn],
                cached_tokens=0 if cold else sent,
            )


@pytest.mark.services
def test_a_real_run_is_judged_on_what_it_sent_before_and_warned_once(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    # Given an 8-session run whose turn 2 adds a large artifact in every session at once:
    # the plain cache share dips there, but all that was sent before is cached
    run_id, ids = make_run(engine, waves="2x8")
    _wave(engine, run_id, ids[:8], cold=False)
    with engine.begin() as conn:
        assert cache_alarm(conn, run_id=run_id) is None
        assert check_run(conn, run_id=run_id, now=utcnow()) is None
    # When the next 8 sessions' turns find nothing in the cache any more
    _wave(engine, run_id, ids[8:], cold=True)
    # Then the alarm names the first of them, and the first check logs it, once
    with engine.begin() as conn:
        alarm = cache_alarm(conn, run_id=run_id)
        assert alarm is not None and alarm.turn == 3 * 8 + 1, alarm
        with caplog.at_level(logging.WARNING, logger="worker.store.cache_alarm"):
            assert check_run(conn, run_id=run_id, now=utcnow()) == alarm
            assert check_run(conn, run_id=run_id, now=utcnow()) is None
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "starting at turn 25" in caplog.records[0].getMessage()


@pytest.mark.services
def test_a_watch_reads_each_call_once_and_finds_what_the_whole_run_shows(engine: Engine) -> None:
    # Given the same run's first wave, all but its first call committed and settled
    run_id, ids = make_run(engine, waves="2x8")
    _wave(engine, run_id, ids[:8], cold=False)
    with engine.begin() as conn:
        first = select(usage).where(usage.c.run_id == run_id).order_by(usage.c.id)
        late = conn.execute(first).first()
        assert late is not None
        conn.execute(delete(usage).where(usage.c.id == late.id))
    watch = CacheWatch()
    later = utcnow() + timedelta(seconds=SETTLE_S + 1)
    with engine.begin() as conn:
        assert watch.watch(conn, now=later, ended_since=later) == []
    # Then a pass read each of its 31 calls, and the next pass reads none again
    assert watch.runs[run_id].read == 31
    with engine.begin() as conn:
        watch.watch(conn, now=later, ended_since=later)
    assert watch.runs[run_id].read == 31
    # When the first call commits late, below what the watch read, and the next wave
    # finds the cache cold
    with engine.begin() as conn:
        conn.execute(insert(usage).values(**late._asdict()))
    _wave(engine, run_id, ids[8:], cold=True)
    now = utcnow()
    with engine.begin() as conn:
        # Then the watch starts the run again, and leaves calls younger than SETTLE_S
        # for a later pass
        assert watch.watch(conn, now=now, ended_since=now) == []
        assert watch.runs[run_id].read == 0
        # and once they settled, it finds and logs the alarm the whole run shows, once
        whole = cache_alarm(conn, run_id=run_id)
        assert whole is not None
        later = now + timedelta(seconds=SETTLE_S + 1)
        assert watch.watch(conn, now=later, ended_since=later) == [whole]
        assert watch.watch(conn, now=later, ended_since=later) == []
