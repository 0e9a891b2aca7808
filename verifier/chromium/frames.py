"""What a page's stepped frames say: its loop's rate and shares, its late window, its canvas
changes and its frame cost, all in page time (see :mod:`verifier.chromium.clock`)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from verifier.chromium.clock import FRAME_MS, LATE_CHANGE_S, Stepped

#: Seconds of page time at the end of the judged time in which the page's loop must run.
LATE_WINDOW_S = 0.5
#: Percentile of the judged frames' costs that must fit a frame.
COST_PERCENTILE = 95


@dataclass(frozen=True)
class FrameFigures:
    """Figures of the judged frames; times are page seconds since the document started.

    Attributes:
        window_s: Length of the judged time.
        display_frames: Frames stepped in the judged time.
        page_frames: Judged frames in which at least one of the page's rAF callbacks ran.
        callbacks: The page's rAF callbacks in the judged time.
        own_loop_share: Share of the judged frames, from the page's first to its last, in
            which its callbacks ran.
        late_window_s: Length of the late window, the end of the judged time.
        late_display_frames: Frames of the late window.
        late_page_frames: Frames of the late window in which the page's callbacks ran.
        last_frame_s: When the page's callbacks last ran (None: never).
        judged_until_s: When the judged time ended.
        watched_until_s: When the stepping ended: the judged time's end, or later when a
            still canvas was watched on (:data:`~verifier.chromium.clock.STILL_WATCH_S`).
        canvas_changed: Whether any canvas changed between two hashes in the judged time.
        change_span_s: The last seconds in which a canvas must change.
        canvas_changed_late: Whether one did, between two hashes in that span.
        last_change_s: Time of the hash after the last change seen (None: never).
        frame_ms_p95_here: 95th percentile of the CPU milliseconds of the judged frames the
            page's callbacks ran in, on this machine.
        frame_ms_p95: The same, scaled to the reference machine.
        script_ms_per_frame: Mean CPU milliseconds of those frames on this machine.
    """

    window_s: float
    display_frames: int
    page_frames: int
    callbacks: int
    own_loop_share: float
    late_window_s: float
    late_display_frames: int
    late_page_frames: int
    last_frame_s: float | None
    judged_until_s: float
    watched_until_s: float
    canvas_changed: bool
    change_span_s: float
    canvas_changed_late: bool
    last_change_s: float | None
    frame_ms_p95_here: float
    frame_ms_p95: float
    script_ms_per_frame: float


def frame_figures(stepped: Stepped) -> FrameFigures:
    """Read the figures the checks need off a stepped page."""
    at = [stepped.first_at_ms + i * FRAME_MS for i in range(len(stepped.ran))]
    judged = range(
        stepped.warmup_frames, min(len(stepped.ran), stepped.warmup_frames + stepped.judged_frames)
    )
    ran = [i for i in judged if stepped.ran[i] > 0]
    window_s = len(judged) * FRAME_MS / 1000
    late_n = min(round(LATE_WINDOW_S * 1000 / FRAME_MS), len(judged) // 2)
    late = judged[len(judged) - late_n :] if late_n else range(0)
    span = range(ran[0], ran[-1] + 1) if ran else range(0)
    every_ran = [i for i, n in enumerate(stepped.ran) if n > 0]
    end_ms = at[judged[-1]] if judged else 0.0
    change_s = min(LATE_CHANGE_S, window_s)
    changed, changed_late, last_change = _changes(
        stepped,
        judged_from_ms=at[stepped.warmup_frames - 1] if stepped.warmup_frames else -1.0,
        late_from_ms=end_ms - change_s * 1000,
    )
    costs = [stepped.cost_ms[i] for i in ran]
    p95 = _percentile(costs, COST_PERCENTILE)
    return FrameFigures(
        window_s=window_s,
        display_frames=len(judged),
        page_frames=len(ran),
        callbacks=sum(stepped.ran[i] for i in judged),
        own_loop_share=len(ran) / len(span) if span else 0.0,
        late_window_s=len(late) * FRAME_MS / 1000,
        late_display_frames=len(late),
        late_page_frames=sum(1 for i in late if stepped.ran[i] > 0),
        last_frame_s=at[every_ran[-1]] / 1000 if every_ran else None,
        judged_until_s=end_ms / 1000,
        watched_until_s=(at[-1] if at else 0.0) / 1000,
        canvas_changed=changed,
        change_span_s=change_s,
        canvas_changed_late=changed_late,
        last_change_s=last_change / 1000 if last_change is not None else None,
        frame_ms_p95_here=p95,
        frame_ms_p95=p95 * stepped.speed_scale,
        script_ms_per_frame=sum(costs) / len(costs) if costs else 0.0,
    )


def _changes(
    stepped: Stepped, *, judged_from_ms: float, late_from_ms: float
) -> tuple[bool, bool, float | None]:
    """Whether a canvas changed in the judged time, and late in it, and when it last did."""
    changed = changed_late = False
    last: float | None = None
    for (before_ms, was), (at_ms, is_) in itertools.pairwise(stepped.keys):
        if was is None or is_ is None or was == is_ or at_ms <= judged_from_ms:
            continue
        last = at_ms
        changed = changed or before_ms >= judged_from_ms - 0.5
        if before_ms >= late_from_ms - 0.5:
            changed_late = True
    return changed, changed_late, last


def _percentile(values: list[float], pct: float) -> float:
    """The nearest-rank percentile of ``values`` (0 for none)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]
