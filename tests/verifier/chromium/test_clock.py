"""Where the stepped frames are hashed, and how long a page may take to be stepped."""

from __future__ import annotations

import pytest

from verifier.chromium.clock import sample_frames, step_budget_s, step_limit_s
from verifier.chromium.page import JUDGED_S, WARMUP_S


def test_the_canvases_are_hashed_each_second_then_each_half_second_in_the_last() -> None:
    # Given the default warm-up and judged time, 30 and 330 frames
    # When the hashed frames are planned
    at = sample_frames(warmup_frames=30, total_frames=360)
    # Then the end of the warm-up, every second, and every half second of the last second
    assert at == [30, 90, 150, 210, 270, 300, 330, 360]


@pytest.mark.parametrize(
    ("warmup", "total", "expected"),
    [
        (30, 90, [30, 60, 90]),  # a judged time no longer than the last second
        (12, 30, [12, 30]),
        (0, 90, [0, 30, 60, 90]),  # without a warm-up, a hash before the first frame
        (30, 30, [30]),  # nothing judged
    ],
)
def test_short_windows_are_hashed_at_both_ends(
    warmup: int, total: int, expected: list[int]
) -> None:
    # Given a short stepping, as the tests ask for
    # When the hashed frames are planned
    # Then the judged time starts and ends with a hash, half a second apart at most
    assert sample_frames(warmup_frames=warmup, total_frames=total) == expected


def test_a_measurement_has_room_for_every_limit_of_its_stepping() -> None:
    # Given the default stepping of 360 frames
    total = round((WARMUP_S + JUDGED_S) * 60)
    # When its budget is computed
    budget = step_budget_s(warmup_s=WARMUP_S, judged_s=JUDGED_S)
    # Then it covers the frames' own limit (10 s per 30 frames) and more
    assert step_limit_s(total_frames=total) == 120.0
    assert budget > step_limit_s(total_frames=total)
