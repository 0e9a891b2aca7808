"""One artifact measured in a fresh, offline browser context.

:func:`measure_page` is the body of :meth:`verifier.chromium.browser.Browser.measure`; it runs on
the browser's event loop. It blames the artifact only for what the artifact can cause (a crashed
tab, a blocked main thread, navigating away) and lets every other Playwright error through
for the caller to report as an infrastructure fault.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from playwright.async_api import Browser as PlaywrightBrowser
from playwright.async_api import ConsoleMessage, Page, Route, ViewportSize
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

from verifier.chromium.png import png_is_blank
from verifier.chromium.probe import MEASURE_CALL, PROBE_JS

logger = logging.getLogger(__name__)

#: The artifact is served as this one document; every other request is aborted.
ARTIFACT_URL = "http://artifact.invalid/"
#: Viewport of every measurement context.
VIEWPORT: ViewportSize = {"width": 1280, "height": 800}
#: Seconds the page runs after load before it is judged.
WARMUP_S = 0.5
#: Seconds the page is judged for, from the end of the warm-up. A dashboard must keep
#: animating, so the judged time reaches well past the first seconds after load, where a
#: loop that stops after a few hundred frames still looks healthy.
JUDGED_S = 5.0
#: The last seconds of the judged time, in which the page's own loop must still be running.
LATE_WINDOW_S = 0.5
#: Some canvas must change between two hashes taken within this many last seconds (long
#: enough for a dashboard that redraws its figures once a second).
LATE_CHANGE_S = 1.0
#: Seconds between two hashes of the page's canvases.
HASH_EVERY_S = 0.5
#: Longest wait for the artifact's ``load`` event.
LOAD_TIMEOUT_S = 10.0
#: Slack on top of warm-up plus window before a page counts as unresponsive.
RESPONSE_SLACK_S = 5.0
#: Longest wait for a screenshot.
SCREENSHOT_TIMEOUT_S = 5.0
#: At most this many errors, requests or popups are kept per page.
MAX_RECORDED = 50
#: Console errors that only repeat a request the route already recorded as blocked.
_BLOCKED_NOISE = "Failed to load resource"


@dataclass(frozen=True)
class BrowserReport:
    """What one artifact did in Chromium during the measurement window.

    Attributes:
        measured: Whether the in-page measurement completed (False if the page hung,
            crashed or navigated away first; the frame and canvas figures are then zero).
        window_s: Length of the judged time as the page's clock saw it.
        fps: Frames per second in which the page's own rAF callbacks ran, over the whole
            judged time (a loop that stops early counts its silence).
        callbacks_per_s: The page's rAF callbacks per second (several loops count apart).
        script_ms_per_frame: Milliseconds the page's rAF callbacks took per frame they ran in.
        own_loop_share: Share of display frames (counted by the probe) in which the page ran,
            from its first frame to its last: how well its own loop drove the frames while
            it ran.
        display_frames: Display frames the probe's own rAF loop saw.
        page_frames: Frames in which at least one of the page's rAF callbacks ran.
        draw_calls: Calls to 2D drawing and path methods during the judged time.
        contexts_2d: ``getContext('2d')`` calls since the page started.
        canvas_size: Width and height of the largest canvas, or None without a canvas.
        canvas_changed: Whether any canvas's pixels changed at all while judged.
        late_window_s: Length of the late window, the end of the judged time.
        late_fps: Frames per second the page's own loop ran at in the late window.
        late_display_frames: Display frames the probe saw in the late window.
        late_share: Share of the late window's display frames in which the page's loop ran.
        early_share: The same share before the late window (a busy machine lowers both
            frame rates alike, not this share).
        last_frame_s: Seconds after load of the page's last rAF callback (None: never ran).
        change_span_s: The last seconds of the judged time in which the canvas must change.
        canvas_changed_late: Whether any canvas changed between two hashes in that span.
        last_change_s: Seconds after load of the last canvas change seen (None: never).
        judged_until_s: Seconds after load at which the judged time ended.
        inputs_blocked: Trusted input events kept from the page.
        input_listeners: Input events the page listens for (``mousemove``, ...).
        errors: Uncaught exceptions, console errors and crash or hang notes.
        blocked_requests: URLs the page tried to load besides its own document.
        window_opens: URLs passed to ``window.open`` (always refused).
        popups: URLs of other pages that opened anyway (closed at once).
        sockets: WebSocket, EventSource or RTCPeerConnection attempts (always refused).
        crashed: The page crashed its tab.
        screenshot_png: A PNG of the viewport at the end, or None if none could be taken.
        screenshot_blank: Whether every pixel of the screenshot has one colour (None: unknown).
        elapsed_s: Wall time from opening the context to closing it.
        sandboxed: Whether Chromium rendered the page in its sandbox (set by the browser).
    """

    measured: bool
    window_s: float
    fps: float
    callbacks_per_s: float
    script_ms_per_frame: float
    own_loop_share: float
    display_frames: int
    page_frames: int
    draw_calls: int
    contexts_2d: int
    canvas_size: tuple[int, int] | None
    canvas_changed: bool
    errors: tuple[str, ...]
    blocked_requests: tuple[str, ...]
    window_opens: tuple[str, ...]
    popups: tuple[str, ...]
    sockets: tuple[str, ...]
    crashed: bool
    screenshot_png: bytes | None = field(repr=False)
    screenshot_blank: bool | None
    elapsed_s: float
    late_window_s: float
    late_fps: float
    late_display_frames: int
    late_share: float
    early_share: float
    last_frame_s: float | None
    change_span_s: float
    canvas_changed_late: bool
    last_change_s: float | None
    judged_until_s: float
    inputs_blocked: int
    input_listeners: tuple[str, ...]
    sandboxed: bool | None = None
    """Whether Chromium rendered the page in its sandbox (None: not known here)."""


@dataclass
class _Observations:
    """Everything the page's event handlers record while it runs."""

    html: str
    errors: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    popups: list[str] = field(default_factory=list)
    crashed: bool = False
    hung: bool = False
    navigated: bool = False
    """The page navigated away or reloaded itself while it was measured."""

    def note(self, bucket: list[str], item: str) -> None:
        if len(bucket) < MAX_RECORDED and item not in bucket:
            bucket.append(item)

    async def route(self, route: Route) -> None:
        request = route.request
        # Requests can still arrive while the context closes; they need no answer then.
        with contextlib.suppress(PlaywrightError):
            if request.url == ARTIFACT_URL and request.is_navigation_request():
                await route.fulfill(
                    status=200, content_type="text/html; charset=utf-8", body=self.html
                )
                return
            self.note(self.blocked, request.url)
            await route.abort("internetdisconnected")

    def on_console(self, message: ConsoleMessage) -> None:
        if message.type == "error" and not message.text.startswith(_BLOCKED_NOISE):
            self.note(self.errors, f"console.error: {message.text}")

    def on_page_error(self, error: PlaywrightError) -> None:
        self.note(self.errors, f"{error.name or 'Error'}: {error.message}")

    def on_crash(self, _page: Page) -> None:
        self.crashed = True
        self.note(
            self.errors, "The page crashed its browser tab (out of memory or a renderer fault)."
        )


async def measure_page(
    browser: PlaywrightBrowser,
    html: str,
    *,
    warmup_s: float,
    measure_s: float,
    is_alive: Callable[[], bool],
) -> BrowserReport:
    """Load ``html`` offline in a fresh context, let it warm up, then measure it.

    Args:
        browser: A connected Playwright browser.
        html: The artifact, a complete HTML document.
        warmup_s: Seconds the page runs before the window opens.
        measure_s: Length of the measurement window in seconds.
        is_alive: Whether the browser process is still up; consulted before blaming the page.

    Returns:
        The report; artifact failures (crash, hang, navigation) are recorded in it.

    Raises:
        playwright.async_api.Error: The browser failed in a way the artifact cannot cause.
    """
    started = time.monotonic()
    seen = _Observations(html)
    context = await browser.new_context(viewport=VIEWPORT)
    try:
        await context.set_offline(True)
        await context.add_init_script(script=PROBE_JS)
        await context.route("**/*", seen.route)
        page = await context.new_page()
        page.on("console", seen.on_console)
        page.on("pageerror", seen.on_page_error)
        page.on("crash", seen.on_crash)
        context.on("page", lambda popup: _close_popup(popup, main=page, seen=seen))
        raw = await _run_probe(
            page, seen, warmup_s=warmup_s, measure_s=measure_s, is_alive=is_alive
        )
        png = None
        if not seen.crashed and not seen.hung:
            png = await _screenshot(page, seen, is_alive=is_alive)
    finally:
        with contextlib.suppress(PlaywrightError, TimeoutError):
            await asyncio.wait_for(context.close(), timeout=LOAD_TIMEOUT_S)
    return _report(raw or {}, seen, png, elapsed_s=time.monotonic() - started)


async def _run_probe(
    page: Page,
    seen: _Observations,
    *,
    warmup_s: float,
    measure_s: float,
    is_alive: Callable[[], bool],
) -> dict[str, Any] | None:
    budget_s = warmup_s + measure_s + RESPONSE_SLACK_S
    late_s = min(LATE_WINDOW_S, measure_s / 2)
    change_s = min(LATE_CHANGE_S, measure_s)
    args = [warmup_s, measure_s, late_s, min(HASH_EVERY_S, change_s / 2), change_s]
    try:
        await page.goto(ARTIFACT_URL, wait_until="load", timeout=LOAD_TIMEOUT_S * 1000)
        logger.debug("loaded artifact (%d bytes)", len(seen.html))
        call = page.evaluate(MEASURE_CALL, [seconds * 1000 for seconds in args])
        raw: dict[str, Any] = await asyncio.wait_for(call, timeout=budget_s)
    except (PlaywrightError, TimeoutError) as exc:
        _blame_page(exc, seen, is_alive=is_alive)
        return None
    return raw


async def _screenshot(
    page: Page, seen: _Observations, *, is_alive: Callable[[], bool]
) -> bytes | None:
    try:
        return await _png(page)
    except (PlaywrightError, TimeoutError) as exc:
        if not seen.navigated:
            _blame_page(exc, seen, is_alive=is_alive)
            return None
        if not is_alive():
            raise
        logger.debug("no screenshot while the page navigates: %s", exc)
    # A page that reloaded itself may still be loading, with no frame to capture ("Unable to
    # capture screenshot"): the document it asked for gets its load, and one more try.
    try:
        await page.wait_for_load_state("load", timeout=LOAD_TIMEOUT_S * 1000)
        return await _png(page)
    except (PlaywrightError, TimeoutError) as exc:
        if not is_alive():
            raise
        # Already blamed for its navigation; it only leaves no screenshot.
        logger.debug("no screenshot after the page's navigation: %s", exc)
        return None


async def _png(page: Page) -> bytes:
    return await page.screenshot(type="png", timeout=SCREENSHOT_TIMEOUT_S * 1000)


def _blame_page(exc: Exception, seen: _Observations, *, is_alive: Callable[[], bool]) -> None:
    """Record a failure the artifact caused, or re-raise one it could not have caused."""
    if not is_alive():
        raise exc
    if seen.crashed:
        return
    text = str(exc)
    if isinstance(exc, (TimeoutError, PlaywrightTimeoutError)):
        seen.hung = True
        seen.note(
            seen.errors,
            "The page stopped responding: its main thread stayed busy (an endless loop or a "
            "very long task), so it could not load or be measured.",
        )
    elif "Execution context was destroyed" in text or "navigat" in text.lower():
        seen.navigated = True
        seen.note(seen.errors, "The page navigated away or reloaded itself during measurement.")
    else:
        raise exc


async def _close_popup(popup: Page, *, main: Page, seen: _Observations) -> None:
    if popup is main:
        return
    seen.note(seen.popups, popup.url)
    with contextlib.suppress(PlaywrightError):
        await popup.close()


def _report(
    raw: dict[str, Any], seen: _Observations, png: bytes | None, *, elapsed_s: float
) -> BrowserReport:
    window_s = float(raw.get("elapsedMs", 0.0)) / 1000
    late_s = float(raw.get("lateMs", 0.0)) / 1000
    display_frames = int(raw.get("displayFrames", 0))
    page_frames = int(raw.get("pageFrames", 0))
    late_frames = int(raw.get("latePageFrames", 0))
    late_display = int(raw.get("lateDisplayFrames", 0))
    running = int(raw.get("displayFramesRunning", 0))
    canvas = raw.get("canvas")
    return BrowserReport(
        measured=bool(raw),
        window_s=window_s,
        fps=_per_s(page_frames, window_s),
        callbacks_per_s=_per_s(int(raw.get("callbacks", 0)), window_s),
        script_ms_per_frame=(
            float(raw.get("callbackMs", 0.0)) / page_frames if page_frames else 0.0
        ),
        own_loop_share=int(raw.get("sharedFramesRunning", 0)) / running if running else 0.0,
        display_frames=display_frames,
        page_frames=page_frames,
        draw_calls=int(raw.get("draws", 0)),
        contexts_2d=int(raw.get("contexts2d", 0)),
        canvas_size=(int(canvas[0]), int(canvas[1])) if canvas else None,
        canvas_changed=bool(raw.get("canvasChanged", False)),
        errors=tuple(seen.errors),
        blocked_requests=tuple(seen.blocked),
        window_opens=tuple(str(url) for url in raw.get("opens", [])[:MAX_RECORDED]),
        popups=tuple(seen.popups),
        sockets=tuple(str(attempt) for attempt in raw.get("sockets", [])[:MAX_RECORDED]),
        crashed=seen.crashed,
        screenshot_png=png,
        screenshot_blank=png_is_blank(png) if png is not None else None,
        elapsed_s=elapsed_s,
        late_window_s=late_s,
        late_fps=_per_s(late_frames, late_s),
        late_display_frames=late_display,
        late_share=_share(late_frames, late_display),
        early_share=_share(page_frames - late_frames, display_frames - late_display),
        last_frame_s=_seconds(raw.get("lastFrameMs")),
        change_span_s=float(raw.get("changeSpanMs", 0.0)) / 1000,
        canvas_changed_late=bool(raw.get("canvasChangedLate", False)),
        last_change_s=_seconds(raw.get("lastChangeMs")),
        judged_until_s=(float(raw.get("warmupMs", 0.0)) / 1000 + window_s) if raw else 0.0,
        inputs_blocked=int(raw.get("inputsBlocked", 0)),
        input_listeners=tuple(str(kind) for kind in raw.get("inputListeners", [])),
    )


def _per_s(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0


def _share(part: int, whole: int) -> float:
    return min(1.0, part / whole) if whole > 0 else 0.0


def _seconds(ms: object) -> float | None:
    return float(ms) / 1000 if isinstance(ms, (int, float)) else None
