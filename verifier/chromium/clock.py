"""Controlled time: a page's first seconds of life, stepped frame by frame by the verifier.

A page is judged on what it does in *page time*, not on how fast this machine happens to
run it. ``clock.js``, installed before any of the page's scripts, replaces the page's clocks:
``requestAnimationFrame``/``cancelAnimationFrame``, ``performance.now``, ``Date`` and
``Date.now``, ``setTimeout``/``setInterval`` and their clearers, and
``requestIdleCallback``. :func:`step_page` then steps the page through
``warmup_s + judged_s`` seconds (6 s by default, 360 frames) as a 60 Hz display would: for
each frame the timers due by its time fire, then every rAF callback requested before it
runs with the frame's time as its timestamp, then style and layout are forced, and a
few microtask turns let the page's promises run before the next frame (its other tasks,
messages and events, run between chunks). Frames are stepped in chunks of half a second of
page time inside one ``evaluate`` call each, and every canvas is hashed at the end of each
chunk, so the page's 6 s cost one round trip per chunk and the frames' own work, not 6 s
of a busy renderer.

Every check about behaviour over time (the loop keeps running, the canvas keeps changing,
no input is needed) is decided from page time, so it is the same on an idle and on a
saturated machine. What a frame costs is measured, not inferred from a frame rate:

* Each frame's work (timers, rAF callbacks, forced style and layout) is timed with the real
  clock inside the page, and each chunk's main-thread CPU time is read from the DevTools
  ``Performance`` domain in thread ticks (``TaskDuration``, CPU time of the renderer's main
  thread). The chunk's CPU over its real time is the share of a CPU the page got; each
  frame's real time times that share is its CPU time, which other processes competing for
  the cores barely change.
* Page time inside a frame advances at that same share of real time (the median of the
  last :data:`RATE_CHUNKS` chunks'), and a frame's cost is the page time it took, so a page
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
#: Frames stepped per ``evaluate`` call; the canvases are hashed after each chunk.
CHUNK_FRAMES = 30
#: Timed runs of the benchmark per page; the fastest is this machine's ``bench_ms``.
BENCH_RUNS = 3
#: Untimed runs of the benchmark first, so that its code is fully optimised when timed.
BENCH_WARMUP_RUNS = 6
#: The page's clock runs at the median CPU share of this many last chunks.
RATE_CHUNKS = 3
#: CPU milliseconds one benchmark run takes on the reference machine (see the module): on
#: the 2-core CI machine it measured 3.6-4.3 ms on one core and 6.0-6.5 ms on the other
#: (a shared host), so the reference is a machine a little slower than its fast core.
REFERENCE_BENCH_MS = 5.0
#: Longest real time one chunk may take before the page counts as unresponsive.
CHUNK_TIMEOUT_S = 10.0
#: The CPU share of a chunk is clamped to at least this (a measurement artefact below it).
MIN_CPU_SHARE = 0.05


_STEP_CALL = "(args) => window.{g}.step(...args)"
_BENCH_CALL = "(runs) => window.{g}.bench(runs)"
_SAMPLE_CALL = "() => window.{g}.sample()"
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
        ran: The page's rAF callbacks that ran in each frame.
        cost_ms: Each frame's CPU milliseconds on this machine.
        keys: (page ms, canvas key) before the first frame and after each chunk; the key is
            None without a canvas to watch.
        judged_draws: Canvas draw calls after the warm-up.
        bench_ms: CPU milliseconds of one benchmark run on this machine.
        cpu_share: Median share of a CPU the page's thread got while stepped.
        summary: What the probe saw besides frames (contexts, canvas, input, opens, sockets).
    """

    first_at_ms: float
    warmup_frames: int
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


def chunks(*, warmup_frames: int, total_frames: int) -> list[int]:
    """Frames per ``evaluate`` call: the warm-up alone, then chunks of :data:`CHUNK_FRAMES`."""
    sizes = [warmup_frames] if warmup_frames else []
    left = total_frames - warmup_frames
    while left > 0:
        sizes.append(min(CHUNK_FRAMES, left))
        left -= sizes[-1]
    return sizes


def step_budget_s(*, warmup_s: float, judged_s: float) -> float:
    """Longest real time :func:`step_page` can take before one of its calls times out."""
    warmup = round(warmup_s * DISPLAY_HZ)
    calls = 2 * len(
        chunks(warmup_frames=warmup, total_frames=warmup + round(judged_s * DISPLAY_HZ))
    )
    return (calls + BENCH_RUNS + 3) * CHUNK_TIMEOUT_S


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
        TimeoutError: One chunk took longer than :data:`CHUNK_TIMEOUT_S` (a hung page).
        playwright.async_api.Error: The page crashed or navigated, or Chromium failed.
    """
    await _timed(cdp.send("Performance.enable", {"timeDomain": "threadTicks"}))
    bench_ms = await _bench_ms(page, cdp, probe)
    keys: list[tuple[float, str | None]] = [(-1.0, await _sample(page, probe))]
    warmup = round(warmup_s * DISPLAY_HZ)
    total = warmup + round(judged_s * DISPLAY_HZ)
    ran: list[int] = []
    cost_ms: list[float] = []
    shares: list[float] = []
    first_at_ms, judged_draws, rate = -1.0, 0, 1.0
    document_id, leaving = None, False
    before = await _task_s(cdp)
    for size in chunks(warmup_frames=warmup, total_frames=total):
        raw = await _timed(page.evaluate(_STEP_CALL.format(g=probe), [size, rate]))
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
        rate = statistics.median(shares[-RATE_CHUNKS:])
        if first_at_ms < 0:
            first_at_ms = float(raw["atMs"]) - (size - 1) * FRAME_MS
        ran.extend(int(n) for n in raw["ran"])
        if len(ran) > warmup:
            judged_draws += int(raw["draws"])
        keys.append((float(raw["atMs"]), raw["key"]))
    summary = await page.evaluate(_SUMMARY_CALL.format(g=probe))
    summary["leaving"] = leaving or summary.get("leaving", False)
    return Stepped(
        first_at_ms=max(first_at_ms, 0.0),
        warmup_frames=warmup,
        ran=ran,
        cost_ms=cost_ms,
        keys=keys,
        judged_draws=judged_draws,
        bench_ms=bench_ms,
        cpu_share=statistics.median(shares) if shares else 1.0,
        summary=summary,
    )


async def _bench_ms(page: Page, cdp: CDPSession, probe: str) -> float:
    """CPU milliseconds of one benchmark run: the fastest of :data:`BENCH_RUNS` runs, each
    timed in thread CPU time, after :data:`BENCH_WARMUP_RUNS` untimed ones."""
    call = _BENCH_CALL.format(g=probe)
    await _timed(page.evaluate(call, BENCH_WARMUP_RUNS))
    best = float("inf")
    for _ in range(BENCH_RUNS):
        before = await _task_s(cdp)
        await _timed(page.evaluate(call, 1))
        best = min(best, (await _task_s(cdp) - before) * 1000)
    return best


async def _sample(page: Page, probe: str) -> str | None:
    key = await _timed(page.evaluate(_SAMPLE_CALL.format(g=probe)))
    return str(key) if key is not None else None


async def _timed(call: Any) -> Any:
    return await asyncio.wait_for(call, timeout=CHUNK_TIMEOUT_S)
