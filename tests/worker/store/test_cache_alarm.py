"""The cache-share alarm: the turn a run's share fell, and only a real fall."""

from __future__ import annotations

from datetime import UTC, datetime

from worker.store.cache_alarm import MIN_HISTORY, WINDOW, UsageRow, find_drop

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
