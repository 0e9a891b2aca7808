"""Controlled time: a page's first seconds of life, stepped frame by frame by the verifier.

A page is judged on what it does in *page time*, not on how fast this machine happens to
run it. ``clock.js``, installed before any of the page's scripts, replaces the page's clocks:
``requestAnimationFrame``/``cancelAnimationFrame``, ``performance.now``, ``Date`` and
``Date.now``, ``setTimeout``/``setInterval`` and their clearers, and
``requestIdleCallback``. :func:`step_page` then steps the page through
``warmup_s + judged_s`` seconds (6 s by default, 360 frames) as a 60 Hz display would: for
each frame the timers due by its time fire, then every rAF callback requested before it
runs with the frame's time as its timestamp, then style and layout are forced, and a
few microtask turns let the page's promises run before the next frame.

The canvases are not read every frame: a hash costs a raster and a read of every canvas,
about as much as a busy dashboard's frame. They are hashed at fixed frames
(:func:`sample_frames`): the end of the warm-up, every second of page time, and every half
second in the last :data:`LATE_CHANGE_S` of the judged time, the only hashes that decide
whether the canvas keeps changing (the earlier ones tell when it stopped). At those same
frames, and only there, the page's other tasks (messages, events) and Chromium's rendering
get a turn, so they come at the same page times on any machine. The frames run inside
``evaluate`` calls that return at the first of those frames after
:data:`CALL_BUDGET_MS` of real time: a cheap page's 6 s take a few round trips, and no
rendering happens between the frames of a stretch, which a 60 Hz display would have drawn
(it would cost more than the frames themselves, and nothing a verdict reads depends on it).

Every check about behaviour over time (the loop keeps running, the canvas keeps changing,
no input is needed) is decided from page time, so it is the same on an idle and on a
saturated machine. A canvas that changed and then stood still through the last second
while the page's loop ran on is watched for up to :data:`STILL_WATCH_S` more seconds, so a
page that pauses is told from one that stopped. What a frame costs is measured, not
inferred from a frame rate:

* Every frame's work (timers, rAF callbacks, forced style and layout) is timed with the real
  clock inside the page (every frame: the cost is not sampled), and each call's main-thread
  CPU time is read from the DevTools ``Performance`` domain in thread ticks
  (``TaskDuration``, CPU time of the renderer's main thread). The call's CPU over its real
  time is the share of a CPU the page got; each frame's real time times that share is its
  CPU time, which other processes competing for the cores barely change.
* Page time inside a frame advances at that same share of real time (the median of the
  last :data:`RATE_CALLS` calls'), and a frame's cost is the page time it took, so a page
  that spins on ``performance.now()`` for 30 ms costs 30 ms, however busy the machine is.
* A fixed benchmark (script math and canvas arcs, in ``probe.js``), timed in thread CPU time
  in the same renderer before the page is stepped (the fastest of :data:`BENCH_RUNS` runs),
  gives this machine's speed against the reference machine: the frame costs are scaled by
  ``REFERENCE_BENCH_MS / bench_ms`` to what they would be there.

The reference machine is the one :data:`REFERENCE_BENCH_MS` was measured on: one core of
the project's 2-core x86_64 CI machine (``python-svc``) running Debian's Chromium 14x
headless shell with ``--disable-gpu``; on it the benchmark takes that many CPU milliseconds
per run. To recalibrate for another reference, run :func:`step_page` there on an idle
machine and put the median ``bench_ms`` of a few pages here (``verifier check`` prints it).

Why not DevTools virtual time or ``HeadlessExperimental.beginFrame``: begin-frame control
exists only in the old headless shell, needs the target created by hand (Playwright creates
its own) and still runs rendering at real cost per frame; virtual time budgets advance
through tasks but do not let us time each frame's work or hash the canvas at chosen page
times, and their behaviour with long tasks differs between Chromium versions. A clock
replaced in the page is the same in every build, costs nothing between frames and lets the
verifier decide exactly when a frame happens.

What the controlled run cannot see is kept, and done in real time: the page's load (its
top-level scripts run when Chromium loads it; one that never finishes is blamed as hung)
and the final screenshot (what the compositor actually shows). No frame rate is measured
in real time any more: ``verifier record`` still films the page in real time, for people.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import statistics
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any

from playwright.async_api import CDPSession, Page

#: Frames per second of the display the page is stepped as.
DISPLAY_HZ = 60
#: Milliseconds of page time between two frames.
FRAME_MS = 1000 / DISPLAY_HZ
#: The canvases are hashed every this many frames (a second of page time) from the end of
#: the warm-up, ...
SAMPLE_FRAMES = 60
#: ... and every this many (half a second) in the last :data:`LATE_CHANGE_S` of the judged
#: time, where some canvas must be seen to change: only those hashes decide a verdict, the
#: earlier ones only tell when a canvas stopped changing. A hash costs a raster and a read
#: of every canvas, about as much as a frame of a busy dashboard.
LATE_SAMPLE_FRAMES = 30
#: Some canvas must change between two hashes taken within this many last seconds of the
#: judged time (long enough for a dashboard that redraws its figures once a second).
LATE_CHANGE_S = 1.0
#: A canvas that changed, then showed the same pixels in every hash of the last
#: :data:`LATE_CHANGE_S` while the page's loop kept running, is watched for up to this many
#: more seconds of page time, hashed every :data:`LATE_SAMPLE_FRAMES`: a page that pauses
#: (a traffic light's red phase, figures redrawn every few seconds) changes again, one whose
#: animation has ended does not. Only the canvas checks read these frames.
STILL_WATCH_S = 6.0
#: Real milliseconds after which one ``evaluate`` call stops stepping frames and returns,
#: at the next hash: a cheap page's 6 s take a few calls, a slow page's one per hash.
CALL_BUDGET_MS = 250.0
#: Timed runs of the benchmark per page; the fastest is this machine's ``bench_ms``.
BENCH_RUNS = 3
#: Untimed runs of the benchmark first, so that its code is fully optimised when timed.
BENCH_WARMUP_RUNS = 6
#: The page's clock runs at the median CPU share of this many last calls.
RATE_CALLS = 3
#: CPU milliseconds one benchmark run takes on the reference machine (see the module): on
#: the 2-core CI machine it measured 3.6-4.3 ms on one core and 6.0-6.5 ms on the other
#: (a shared host), so the reference is a machine a little slower than its fast core.
REFERENCE_BENCH_MS = 5.0
#: Longest real time one call into the page may take before the page counts as
#: unresponsive.
CALL_TIMEOUT_S = 10.0
#: A page counts as unresponsive when :data:`SLOW_FRAMES` of its frames take longer than
#: :data:`SLOW_FRAMES_TIMEOUT_S` of real time (in one stretch between two hashes, or on
#: average over the whole stepping): it is stepped, but far too slowly to finish.
SLOW_FRAMES = 30
#: See :data:`SLOW_FRAMES`.
SLOW_FRAMES_TIMEOUT_S = 10.0
#: The CPU share of a call is clamped to at least this (a measurement artefact below it).
MIN_CPU_SHARE = 0.05


_STEP_CALL = "(args) => window.{g}.step(...args)"
_BENCH_CALL = "(runs) => window.{g}.bench(runs)"
_SUMMARY_CALL = "() => window.{g}.summary()"


@cache
def clock_script() -> str:
    """The text of ``clock.js``, read once per process."""
    return (files(__package__) / "clock.js").read_text(encoding="utf-8")


@dataclass(frozen=True)
class Stepped:
    """A page stepped through page time, frame by frame.

    Attributes:
        first_at_ms: Page time of the first stepped frame (page time 0 is the document's
            start; the frames begin at the first frame boundary after the load).
        warmup_frames: How many of the first frames are the warm-up.
        judged_frames: How many frames follow the warm-up in the judged time; any after
            them were stepped only to watch a still canvas (:data:`STILL_WATCH_S`).
        ran: The page's rAF callbacks that ran in each frame.
        cost_ms: Each frame's CPU milliseconds on this machine.
        keys: (page ms, canvas key) after each frame of :func:`sample_frames` (page ms -1:
            before the first frame); the key is None without a canvas to watch.
        judged_draws: Canvas draw calls after the warm-up.
        bench_ms: CPU milliseconds of one benchmark run on this machine.
        cpu_share: Median share of a CPU the page's thread got while stepped.
        summary: What the probe saw besides frames (contexts, canvas, input, opens, sockets).
    """

    first_at_ms: float
    warmup_frames: int
    judged_frames: int
    ran: list[int]
    cost_ms: list[float]
    keys: list[tuple[float, str | None]]
    judged_draws: int
    bench_ms: float
    cpu_share: float
    summary: dict[str, Any]

    @property
    def speed_scale(self) -> float:
        """Factor from this machine's frame costs to the reference machine's."""
        return REFERENCE_BENCH_MS / self.bench_ms if self.bench_ms > 0 else 1.0


def sample_frames(*, warmup_frames: int, total_frames: int) -> list[int]:
    """After which frames (counted from 1; 0 is before the first) the canvases are hashed.

    The end of the warm-up (or, without one, before the first frame), then every
    :data:`SAMPLE_FRAMES` frames, then every :data:`LATE_SAMPLE_FRAMES` frames from
    :data:`LATE_CHANGE_S` before the end, and the last frame.
    """
    late_from = max(warmup_frames, total_frames - round(LATE_CHANGE_S * DISPLAY_HZ))
    at = {warmup_frames, total_frames}
    at.update(range(warmup_frames + SAMPLE_FRAMES, late_from, SAMPLE_FRAMES))
    at.update(range(late_from, total_frames, LATE_SAMPLE_FRAMES))
    return sorted(at)


def step_limit_s(*, total_frames: int) -> float:
    """Longest real time the frames of :func:`step_page` may take altogether."""
    return math.ceil(total_frames / SLOW_FRAMES) * SLOW_FRAMES_TIMEOUT_S


def step_budget_s(*, warmup_s: float, judged_s: float) -> float:
    """Longest real time :func:`step_page` can take before one of its limits is reached."""
    total = _frames(warmup_s) + _frames(judged_s) + _frames(STILL_WATCH_S)
    # The benchmark's calls, Performance.enable and the summary, then the frames, and the
    # last step call, which may run past their limit.
    calls = 2 * BENCH_RUNS + 4
    last_call_s = CALL_BUDGET_MS / 1000 + SLOW_FRAMES_TIMEOUT_S * math.ceil(
        SAMPLE_FRAMES / SLOW_FRAMES
    )
    return calls * CALL_TIMEOUT_S + step_limit_s(total_frames=total) + last_call_s


async def _task_s(cdp: CDPSession) -> float:
    """CPU seconds the renderer's main thread has spent in tasks so far."""
    # Timed like every call: a crashed renderer never answers its DevTools session.
    reply = await _timed(cdp.send("Performance.getMetrics"))
    return float(next(m["value"] for m in reply["metrics"] if m["name"] == "TaskDuration"))


async def step_page(
    page: Page, cdp: CDPSession, *, probe: str, warmup_s: float, judged_s: float
) -> Stepped:
    """Step a loaded page through ``warmup_s + judged_s`` seconds of page time.

    Args:
        page: The page, loaded, with ``clock.js`` and the probe installed.
        cdp: A DevTools session on the page.
        probe: Name of the probe's global.
        warmup_s: Page seconds stepped before the judged time.
        judged_s: Page seconds judged.

    Returns:
        Every frame's callbacks and CPU cost, and the canvas keys.

    Raises:
        TimeoutError: A call took longer than its timeout (:data:`SLOW_FRAMES`), or the
            frames took longer than :func:`step_limit_s` altogether (a hung page).
        playwright.async_api.Error: The page crashed or navigated, or Chromium failed.
    """
    await _timed(cdp.send("Performance.enable", {"timeDomain": "threadTicks"}))
    bench_ms = await _bench_ms(page, cdp, probe)
    warmup = _frames(warmup_s)
    judged = warmup + _frames(judged_s)
    sample_at = sample_frames(warmup_frames=warmup, total_frames=judged)
    keys: list[tuple[float, str | None]] = []
    ran: list[int] = []
    cost_ms: list[float] = []
    shares: list[float] = []
    first_at_ms, judged_draws, rate = -1.0, 0, 1.0
    document_id, leaving = None, False
    deadline = asyncio.get_running_loop().time() + step_limit_s(
        total_frames=judged + _frames(STILL_WATCH_S)
    )
    before = await _task_s(cdp)
    total = judged
    while len(ran) < total:
        # A call never straddles the end of the warm-up or of the judged time, so its draws
        # are judged or not.
        end = warmup if len(ran) < warmup else judged if len(ran) < judged else total
        size = end - len(ran)
        raw = await _timed(
            page.evaluate(_STEP_CALL.format(g=probe), [size, rate, CALL_BUDGET_MS, sample_at]),
            timeout_s=_step_timeout_s(sample_at, stepped=len(ran), until=len(ran) + size),
        )
        # A navigation the page started commits between two calls: the next call would
        # step the new document, so the old one's leaving ends the stepping.
        document_id = document_id or raw["documentId"]
        if raw["leaving"] or raw["documentId"] != document_id:
            leaving = True
            break
        after = await _task_s(cdp)
        spent_ms, before = (after - before) * 1000, after
        wall_ms = float(raw["wallMs"])
        # A frame costs the page time it took: its real time at the rate its clock ran,
        # so a frame that spins on the clock for 30 ms costs 30 ms, and one that computes
        # costs the CPU it got.
        cost_ms.extend(float(c) * rate for c in raw["costs"])
        shares.append(min(1.0, max(MIN_CPU_SHARE, spent_ms / wall_ms if wall_ms > 0 else 1.0)))
        rate = statistics.median(shares[-RATE_CALLS:])
        if first_at_ms < 0:
            first_at_ms = float(raw["atMs"]) - (len(raw["ran"]) - 1) * FRAME_MS
        if warmup <= len(ran) < judged:
            judged_draws += int(raw["draws"])
        ran.extend(int(n) for n in raw["ran"])
        keys.extend((float(at_ms), None if key is None else str(key)) for at_ms, key in raw["keys"])
        if len(ran) == total and total - judged < _frames(STILL_WATCH_S) and _paused(keys, ran):
            total += LATE_SAMPLE_FRAMES
            sample_at.append(total)
        if len(ran) < total and asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"only {len(ran)} of {total} frames stepped in time")
    summary = await _timed(page.evaluate(_SUMMARY_CALL.format(g=probe)))
    summary["leaving"] = leaving or summary.get("leaving", False)
    return Stepped(
        first_at_ms=max(first_at_ms, 0.0),
        warmup_frames=warmup,
        judged_frames=judged - warmup,
        ran=ran,
        cost_ms=cost_ms,
        keys=keys,
        judged_draws=judged_draws,
        bench_ms=bench_ms,
        cpu_share=statistics.median(shares) if shares else 1.0,
        summary=summary,
    )


def _frames(seconds: float) -> int:
    return round(seconds * DISPLAY_HZ)


def _paused(keys: list[tuple[float, str | None]], ran: list[int]) -> bool:
    """Whether a canvas changed once, has shown the same pixels in every hash of the last
    :data:`LATE_CHANGE_S` (or since the watch began), and the page's loop still runs."""
    if not ran or ran[-1] == 0 or not keys or keys[-1][1] is None:
        return False
    last_ms, last = keys[-1]
    still_from_ms = last_ms
    for at_ms, key in reversed(keys):
        if key != last:
            break
        still_from_ms = at_ms
    changed = any(a != b and None not in (a, b) for (_, a), (_, b) in itertools.pairwise(keys))
    return changed and last_ms - still_from_ms >= LATE_CHANGE_S * 1000 - 0.5


async def _bench_ms(page: Page, cdp: CDPSession, probe: str) -> float:
    """CPU milliseconds of one benchmark run: the fastest of :data:`BENCH_RUNS` runs, each
    timed in thread CPU time, after :data:`BENCH_WARMUP_RUNS` untimed ones."""
    call = _BENCH_CALL.format(g=probe)
    await _timed(page.evaluate(call, BENCH_WARMUP_RUNS))
    best, before = float("inf"), await _task_s(cdp)
    for _ in range(BENCH_RUNS):
        await _timed(page.evaluate(call, 1))
        after = await _task_s(cdp)
        best, before = min(best, (after - before) * 1000), after
    return best


def _step_timeout_s(sample_at: list[int], *, stepped: int, until: int) -> float:
    """Longest real time a step call may take: its budget, then up to the next hash, at
    :data:`SLOW_FRAMES_TIMEOUT_S` for every :data:`SLOW_FRAMES` frames of the longest
    stretch between two hashes it may step."""
    ends = [at for at in sample_at if stepped < at <= until] or [until]
    gaps = [b - a for a, b in itertools.pairwise([stepped, *ends])]
    return CALL_BUDGET_MS / 1000 + SLOW_FRAMES_TIMEOUT_S * math.ceil(max(gaps) / SLOW_FRAMES)


async def _timed(call: Any, *, timeout_s: float = CALL_TIMEOUT_S) -> Any:
    return await asyncio.wait_for(call, timeout=timeout_s)
