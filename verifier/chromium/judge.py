"""The verdict on one artifact: static checks first, then what it did in Chromium.

Every check carries its measured value and one sentence an agent can act on to repair the
page. The browser is only started for pages that pass the static checks. Every browser check
is decided in page time (:mod:`verifier.chromium.clock`), so a verdict does not depend on how
busy the machine is: the frame rate is the rate of the page's own loop when it is offered
60 frames a second, and whether the page is fast enough is its frame cost on the reference
machine (``frame_cost``), not the frame rate this machine happened to reach.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from verifier.verdict import Verdict
from worker.settings import DEFAULT_VERIFY_MIN_FPS
from worker.tasks.base import Check, passed
from worker.tasks.dashboard.checks import DEFAULT_MAX_BYTES, static_checks

if TYPE_CHECKING:
    from verifier.chromium.browser import Browser, BrowserReport

__all__ = [
    "DEFAULT_MIN_FPS",
    "FRAME_BUDGET_MS",
    "MIN_KEEP_RUNNING_RATIO",
    "MIN_OWN_LOOP_SHARE",
    "Verdict",
    "browser_checks",
    "judge",
]

#: Frames per second the page's own animation loop must reach in page time.
DEFAULT_MIN_FPS = DEFAULT_VERIFY_MIN_FPS
#: CPU milliseconds the 95th-percentile frame may cost on the reference machine: one frame
#: of a 60 Hz display.
FRAME_BUDGET_MS = 1000 / 60
#: Share of display frames in which the page's own rAF loop must run.
MIN_OWN_LOOP_SHARE = 0.9
#: In the late window the page's loop must run in at least this share of the display frames
#: it ran in before (as a share of display frames, so a machine that slows down as a whole
#: does not count as the page slowing down).
MIN_KEEP_RUNNING_RATIO = 0.5
#: At most this many URLs or messages are quoted in a detail sentence.
_QUOTED = 3


def judge(
    html: str,
    *,
    browser: Browser | None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    min_fps: float = DEFAULT_MIN_FPS,
    static: list[Check] | None = None,
) -> Verdict:
    """Judge one artifact.

    Args:
        html: The artifact, a complete HTML document.
        browser: The shared browser; None judges on the static checks alone.
        max_bytes: Size ceiling in UTF-8 bytes.
        min_fps: Frames per second the page's own loop must reach in page time.
        static: The task's static checks of the page, already run (default: the
            dashboard's, run here).

    Returns:
        The verdict; static failures skip the browser entirely.

    Raises:
        BrowserUnavailable: Chromium failed; the artifact was not judged.
    """
    checks = list(static) if static is not None else static_checks(html, max_bytes=max_bytes)
    if not passed(checks) or browser is None:
        return Verdict(passed=passed(checks), checks=checks, fps=None)
    report = browser.measure(html)
    checks += browser_checks(report, min_fps=min_fps)
    return Verdict(
        passed=passed(checks),
        checks=checks,
        fps=round(report.fps, 1),
        screenshot_png=report.screenshot_png,
        sandbox=report.sandboxed,
    )


def browser_checks(report: BrowserReport, *, min_fps: float = DEFAULT_MIN_FPS) -> list[Check]:
    """Turn a browser report into checks, each with its measured value.

    Args:
        report: What the page did in Chromium.
        min_fps: Frames per second the page's own loop must reach.

    Returns:
        ``fps``, ``frame_cost``, ``own_loop_share``, ``loop_keeps_running``,
        ``canvas_changes``,
        ``no_page_errors``, ``no_blocked_requests``, ``no_popups``, ``no_sockets``,
        ``screenshot_not_blank``.
    """
    return [
        _fps(report, min_fps),
        _frame_cost(report),
        _own_loop_share(report),
        _loop_keeps_running(report),
        _canvas_changes(report),
        _no_page_errors(report),
        _no_blocked_requests(report),
        _no_popups(report),
        _no_sockets(report),
        _screenshot_not_blank(report),
    ]


def _quote(items: tuple[str, ...] | list[str]) -> str:
    shown = ", ".join(repr(item) for item in items[:_QUOTED])
    return shown + (f" and {len(items) - _QUOTED} more" if len(items) > _QUOTED else "")


_UNMEASURED = (
    "The page could not be measured because it hung, crashed or navigated away (see "
    "no_page_errors); fix that first."
)
_NEVER_RAN = (
    "The page's own requestAnimationFrame callbacks never ran while it was judged; keep the "
    "animation going by calling requestAnimationFrame(frame) again at the end of every frame "
    "callback."
)
_NEVER_RAN_BLOCKED = (
    "The page's own requestAnimationFrame callbacks never ran while it was judged, and it "
    "tried to load resources that cannot load offline (see no_blocked_requests): if the loop "
    "waits for one of them (an image's onload, a fetch), it never starts; inline what it "
    "needs and start the loop when the page loads."
)
_KEEP_GOING = (
    "a dashboard must keep animating for as long as it is open, so do not end the loop after "
    "a number of frames, a timeout or a finished intro: call requestAnimationFrame(frame) at "
    "the end of every frame callback, unconditionally."
)


def _needs_input(report: BrowserReport) -> bool:
    """Whether the page listens for input and its own loop did not run without it."""
    return bool(report.input_listeners) and report.late_fps == 0 and report.fps < 1.0


def _input_hint(report: BrowserReport, *, full: bool) -> str:
    kinds = ", ".join(report.input_listeners[:_QUOTED])
    if not full:  # the fps check carries the whole hint; the others point at it
        return (
            f"The page waits for input (it listens for {kinds}) to animate, and none reaches "
            "it while it is judged; see fps."
        )
    return (
        f"The page does not animate on its own: it waits for input (it listens for {kinds}), "
        "and no mouse, touch or keyboard input reaches it while it is judged; start the "
        "requestAnimationFrame loop when the page loads and keep it running without any "
        "input (input may change what is shown, never whether it moves)."
    )


def _still_without_input(report: BrowserReport) -> str:
    """A sentence for a page whose loop runs but whose canvas moves only with input."""
    if not report.input_listeners:
        return ""
    kinds = ", ".join(report.input_listeners[:_QUOTED])
    return (
        f" The page listens for {kinds}, and no input reaches it while it is judged: it must "
        "move on its own, input may only change what it shows."
    )


def _still(report: BrowserReport, *, full: bool = False) -> str | None:
    """The hint for a page whose own loop did not run at all, or None if it ran."""
    if not report.measured:
        return _UNMEASURED
    if _needs_input(report):
        return _input_hint(report, full=full)
    if report.page_frames == 0:
        return _NEVER_RAN_BLOCKED if report.blocked_requests else _NEVER_RAN
    return None


def _stopped(report: BrowserReport) -> bool:
    """Whether the page's loop ran and then stopped while frames went on being offered."""
    return report.page_frames > 0 and report.late_fps == 0


def _stopped_hint(report: BrowserReport) -> str:
    when = f"{report.last_frame_s:.1f} s" if report.last_frame_s is not None else "soon"
    return (
        f"The page's animation loop stopped {when} after load and did not run again up to "
        f"{report.judged_until_s:.1f} s; {_KEEP_GOING}"
    )


def _fps(report: BrowserReport, min_fps: float) -> Check:
    fps = round(report.fps, 1)
    if fps >= min_fps:
        detail = (
            f"The page's requestAnimationFrame loop ran at {fps:g} fps of page time "
            f"({min_fps:g} needed)."
        )
    elif (still := _still(report, full=True)) is not None:
        detail = still
    elif _stopped(report):
        detail = (
            f"The page's animation loop ran at only {fps:g} fps ({min_fps:g} needed) over the "
            f"{report.window_s:.1f} s it was judged because it stopped "
            f"{report.last_frame_s or 0:.1f} s after load (see loop_keeps_running)."
        )
    else:
        detail = (
            f"The page's animation loop ran at only {fps:g} fps ({min_fps:g} needed) although "
            "it was offered 60 frames a second; call requestAnimationFrame(frame) directly "
            "at the end of every frame callback instead of throttling it with timers."
        )
    return Check("fps", fps >= min_fps, fps, detail)


def _frame_cost(report: BrowserReport) -> Check:
    cost = round(report.frame_ms_p95, 1)
    ok = cost <= FRAME_BUDGET_MS
    if not report.measured or report.page_frames == 0:
        detail = "No frame of the page's own loop ran, so there is no frame cost to judge."
    elif ok:
        detail = (
            f"The page's frames cost {cost:g} ms of CPU at the 95th percentile on the "
            f"reference machine, within a 60 Hz frame ({FRAME_BUDGET_MS:.1f} ms)."
        )
    else:
        detail = (
            f"The page's frames cost {cost:g} ms of CPU at the 95th percentile on the "
            f"reference machine, more than a 60 Hz frame allows ({FRAME_BUDGET_MS:.1f} ms); do "
            "less work per frame (fewer draw calls, no per-frame allocation, layout reads or "
            "busy waiting; compute data when it changes, not every frame)."
        )
    return Check("frame_cost", ok, cost, detail)


def _own_loop_share(report: BrowserReport) -> Check:
    share = round(report.own_loop_share, 3)
    ok = share >= MIN_OWN_LOOP_SHARE
    if ok:
        detail = f"The page's own loop ran in {share:.0%} of display frames while it ran."
    elif (still := _still(report)) is not None:
        detail = still
    else:
        detail = (
            f"The page's own loop ran in only {share:.0%} of display frames "
            f"({MIN_OWN_LOOP_SHARE:.0%} needed); request the next frame with "
            "requestAnimationFrame from inside every frame callback, not from setTimeout, "
            "setInterval or event handlers."
        )
    return Check("own_loop_share", ok, share, detail)


def _loop_keeps_running(report: BrowserReport) -> Check:
    late = round(report.late_fps, 1)
    ok = late > 0 and report.late_share >= MIN_KEEP_RUNNING_RATIO * report.early_share
    start = report.judged_until_s - report.late_window_s
    if ok:
        detail = (
            f"The page's own loop was still running {start:.1f}-{report.judged_until_s:.1f} s "
            f"after load, at {late:g} fps."
        )
    elif (still := _still(report)) is not None:
        detail = still
    elif _stopped(report):
        detail = _stopped_hint(report)
    else:
        detail = (
            f"From {start:.1f} s after load the page's own loop ran in only "
            f"{report.late_share:.0%} of display frames, down from {report.early_share:.0%} "
            "before; keep requesting every frame with requestAnimationFrame for as long as the "
            "page is open, without pauses or a slower mode later on."
        )
    return Check("loop_keeps_running", ok, late, detail)


def _canvas_changes(report: BrowserReport) -> Check:
    late_from = report.judged_until_s - report.change_span_s
    resumed_s = report.last_change_s or 0.0
    if report.canvas_changed_late and resumed_s > report.judged_until_s + 0.01:
        detail = (
            f"The canvas stood still from {late_from:.1f} s after load and changed again at "
            f"{resumed_s:.1f} s: the page paused, it did not stop."
        )
    elif report.canvas_changed_late:
        detail = (
            f"The canvas pixels were still changing {late_from:.1f}-"
            f"{report.judged_until_s:.1f} s after load."
        )
    elif not report.measured:
        detail = _UNMEASURED
    elif report.canvas_size is None:
        detail = (
            "No <canvas> element was in the document while the page was measured; add a "
            "visible canvas and draw into it every frame."
        )
    elif _needs_input(report):
        detail = _input_hint(report, full=False)
    elif report.canvas_changed and report.last_change_s is not None:
        if _stopped(report):
            cause = (
                f"because its animation loop stopped at {report.last_frame_s or 0:.1f} s (see "
                "loop_keeps_running)"
            )
        else:
            cause = (
                "although its loop kept running; draw something that moves or changes in "
                "every frame, for as long as the page is open"
            )
        detail = (
            f"The canvas stopped changing {report.last_change_s:.1f} s after load and showed "
            f"the same pixels from then up to {report.watched_until_s:.1f} s, {cause}."
            + _still_without_input(report)
        )
    else:
        width, height = report.canvas_size
        detail = (
            "Every canvas showed exactly the same pixels throughout the measurement (the "
            f"largest is {width}x{height}); redraw one every frame with something that moves "
            "or changes." + _still_without_input(report)
        )
    return Check("canvas_changes", report.canvas_changed_late, report.canvas_changed_late, detail)


def _no_page_errors(report: BrowserReport) -> Check:
    errors = list(report.errors)
    if not errors:
        detail = "The page ran without errors."
    else:
        detail = (
            f"The page reported {len(errors)} error(s), first {errors[0]!r}; fix the code so "
            "it runs with an empty error console."
        )
    return Check("no_page_errors", not errors, errors, detail)


def _no_blocked_requests(report: BrowserReport) -> Check:
    urls = list(report.blocked_requests)
    if not urls:
        detail = "The page made no network requests beyond its own document."
    else:
        detail = (
            f"The page tried to load {len(urls)} resource(s) from the network ({_quote(urls)}), "
            "which fail offline; inline every script, style, font and image (data: URLs are "
            "fine) and remove fetch/XHR calls."
        )
    return Check("no_blocked_requests", not urls, urls, detail)


def _no_popups(report: BrowserReport) -> Check:
    opened = [*report.window_opens, *report.popups]
    value = {"window_open": list(report.window_opens), "popups": list(report.popups)}
    if not opened:
        detail = "The page opened no other windows."
    else:
        detail = (
            f"The page tried to open {len(opened)} other window(s) ({_quote(opened)}); remove "
            "window.open and target=_blank links, everything must happen inside the page."
        )
    return Check("no_popups", not opened, value, detail)


def _no_sockets(report: BrowserReport) -> Check:
    sockets = list(report.sockets)
    if not sockets:
        detail = "The page opened no WebSocket, EventSource or WebRTC connections."
    else:
        detail = (
            f"The page tried to open {len(sockets)} network connection(s) ({_quote(sockets)}); "
            "remove WebSocket, EventSource and RTCPeerConnection use and simulate live data "
            "in the page instead."
        )
    return Check("no_sockets", not sockets, sockets, detail)


def _screenshot_not_blank(report: BrowserReport) -> Check:
    ok = report.screenshot_png is not None and report.screenshot_blank is not True
    if report.screenshot_png is None:
        detail = (
            "No screenshot could be taken because the page crashed or hung; make sure it "
            "loads and keeps its main thread free between frames."
        )
    elif report.screenshot_blank is None:
        detail = "The screenshot's format could not be read, so blankness was not judged."
    elif report.screenshot_blank:
        detail = (
            "The screenshot was one flat colour; draw visible shapes or text in colours that "
            "contrast with the background on a canvas that is on screen."
        )
    else:
        detail = "The screenshot shows visible content."
    return Check("screenshot_not_blank", ok, ok, detail)
