"""One artifact measured in an offline browser tab, in controlled time.

:func:`measure_page` is the body of :meth:`verifier.chromium.browser.Browser.measure`; it runs on
the browser's event loop. It loads the page in real time, steps it through its first seconds
of page time (:mod:`verifier.chromium.clock`) and takes a screenshot. It blames the artifact
only for what the artifact can cause (a crashed tab, a blocked main thread, navigating away)
and lets every other Playwright error through for the caller to report as an infrastructure
fault.

A :class:`Tab` (an offline browser context with one page) judges up to :data:`TAB_REUSE`
artifacts one after the other: a fresh context costs a renderer process, its start and its
shutdown, about 0.15 CPU-seconds, a tenth of judging a dashboard. Every artifact still starts
clean: it is a new document, at an origin of its own (``http://a<n>.artifact.localhost/``), so
its storage (local and session storage, IndexedDB, caches) is its own; the tab's cookies are
cleared before it loads, and its window name is reset before its first script runs. A tab
whose artifact crashed, hung, navigated away or left a handler that runs when a document is
left (``unload``, ``pagehide``, ``beforeunload``, ``visibilitychange``) is closed rather than
reused; a reused tab that cannot load the next artifact in time is closed, and the artifact
is measured again in a fresh one (:class:`StaleTab`), so a page is never blamed for what the
one before it left behind.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from playwright.async_api import Browser as PlaywrightBrowser
from playwright.async_api import (
    BrowserContext,
    CDPSession,
    ConsoleMessage,
    Page,
    Route,
    ViewportSize,
)
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

from verifier.chromium.clock import Stepped, step_page
from verifier.chromium.frames import frame_figures
from verifier.chromium.png import png_is_blank
from verifier.chromium.probe import PROBE_GLOBAL, PROBE_JS

logger = logging.getLogger(__name__)

#: The artifact is served as this one document; every other request is aborted. Measured
#: artifacts are served at an origin of their own under it (:func:`artifact_url`), and the
#: requests they make are reported as if made from this one. A ``localhost`` name makes the
#: page a secure context, as a file opened in a browser is (``crypto.randomUUID``,
#: ``navigator.mediaDevices`` exist), without mixed-content rules that would block an
#: ``http:`` load before the verifier sees it; nothing ever reaches a network or a resolver:
#: every request is answered or aborted by the context's route.
ARTIFACT_URL = "http://artifact.localhost/"
#: Artifacts one tab judges before it is closed and a fresh one opened: what one document
#: leaves in its renderer (caches, fragmented memory) does not pile up for long.
TAB_REUSE = 24
#: Viewport of every measurement context.
VIEWPORT: ViewportSize = {"width": 1280, "height": 800}
#: Seconds of page time the page runs after load before it is judged.
WARMUP_S = 0.5
#: Seconds of page time the page is judged for, from the end of the warm-up: with the
#: warm-up, its first 6 s of life. A dashboard must keep animating, so the judged time
#: reaches well past the first seconds after load, where a loop that stops after a few
#: hundred frames still looks healthy.
JUDGED_S = 5.5
#: Longest wait for the artifact's ``load`` event.
LOAD_TIMEOUT_S = 10.0
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
        Every time is page time (:mod:`verifier.chromium.clock`): the same on any machine.

        measured: Whether the in-page measurement completed (False if the page hung,
            crashed or navigated away first; the frame and canvas figures are then zero).
        window_s: Length of the judged time in page seconds.
        fps: Frames per second in which the page's own rAF callbacks ran, over the whole
            judged time (a loop that stops early counts its silence).
        callbacks_per_s: The page's rAF callbacks per second (several loops count apart).
        script_ms_per_frame: Mean CPU milliseconds (on this machine) of the frames the
            page's callbacks ran in: its timers, callbacks, style and layout.
        own_loop_share: Share of the stepped 60 Hz frames in which the page ran, from its
            first frame to its last: how well its own loop drove the frames while it ran.
        display_frames: Frames stepped in the judged time.
        page_frames: Frames in which at least one of the page's rAF callbacks ran.
        draw_calls: Calls to 2D drawing and path methods during the judged time.
        contexts_2d: ``getContext('2d')`` calls since the page started.
        canvas_size: Width and height of the largest canvas, or None without a canvas.
        canvas_changed: Whether any canvas's pixels changed at all while judged.
        late_window_s: Length of the late window, the end of the judged time.
        late_fps: Frames per second the page's own loop ran at in the late window.
        late_display_frames: Frames stepped in the late window.
        late_share: Share of the late window's frames in which the page's loop ran.
        early_share: The same share before the late window.
        last_frame_s: Seconds after load of the page's last rAF callback (None: never ran).
        change_span_s: The last seconds of the judged time in which the canvas must change.
        canvas_changed_late: Whether any canvas changed between two hashes in that span.
        last_change_s: Seconds after load of the last canvas change seen (None: never).
        judged_until_s: Seconds after load at which the judged time ended.
        watched_until_s: Seconds after load at which the stepping ended: later than
            ``judged_until_s`` when a canvas that stood still was watched on.
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
        frame_ms_p95: 95th percentile of the CPU milliseconds of the judged frames the
            page's callbacks ran in, scaled to the reference machine
            (:data:`verifier.chromium.clock.REFERENCE_BENCH_MS`).
        frame_ms_p95_here: The same percentile as measured on this machine.
        speed_scale: Factor from this machine's frame costs to the reference machine's.
        cpu_share: Median share of a CPU the page's main thread got while it was stepped.
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
    watched_until_s: float
    inputs_blocked: int
    input_listeners: tuple[str, ...]
    sandboxed: bool | None = None
    """Whether Chromium rendered the page in its sandbox (None: not known here)."""
    frame_ms_p95: float = 0.0
    frame_ms_p95_here: float = 0.0
    speed_scale: float = 1.0
    cpu_share: float = 1.0


@dataclass
class _Observations:
    """Everything the page's event handlers record while it runs."""

    html: str
    url: str = ARTIFACT_URL
    """Where the artifact is served."""
    errors: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    popups: list[str] = field(default_factory=list)
    crashed: bool = False
    hung: bool = False
    navigated: bool = False
    """The page navigated away or reloaded itself while it was measured."""

    def note(self, bucket: list[str], item: str) -> None:
        # Reported as if served at ARTIFACT_URL, whichever origin this artifact had.
        item = item.replace(self.url, ARTIFACT_URL)
        if len(bucket) < MAX_RECORDED and item not in bucket:
            bucket.append(item)

    def on_console(self, message: ConsoleMessage) -> None:
        # The page's own console.error calls reach the probe, not DevTools (probe.js); what
        # comes here is Chromium's own (a refused script, a policy violation).
        if message.type == "error" and not message.text.startswith(_BLOCKED_NOISE):
            self.note(self.errors, f"console.error: {message.text}")

    def on_page_error(self, error: PlaywrightError) -> None:
        self.note(self.errors, f"{error.name or 'Error'}: {error.message}")

    def on_crash(self, _page: Page) -> None:
        self.crashed = True
        self.note(
            self.errors, "The page crashed its browser tab (out of memory or a renderer fault)."
        )


class StaleTab(Exception):
    """A reused tab could not load the next artifact in time.

    What the artifact before it left behind may be the cause, not this one: the caller
    closes the tab and measures the artifact again in a fresh one.
    """


def artifact_url(n: int) -> str:
    """Where a tab serves its ``n``-th artifact: an origin of its own under ARTIFACT_URL."""
    return f"http://a{n}.{ARTIFACT_URL.removeprefix('http://')}"


class Tab:
    """An offline browser context with one page, judging artifacts one after the other.

    Open one with :meth:`open`; every handler of the context and the page reports to the
    artifact being measured (``seen``), and nothing is recorded between two artifacts.
    """

    def __init__(self, context: BrowserContext) -> None:
        self.context = context
        self.page: Page | None = None
        self.cdp: CDPSession | None = None
        self.seen: _Observations | None = None
        self.judged = 0
        """Artifacts this tab has started to measure."""
        self.spoiled = False
        """The tab must not judge another artifact (see the module)."""

    @classmethod
    async def open(cls, browser: PlaywrightBrowser) -> Tab:
        """Open a tab on ``browser``, with the clock and the probe installed."""
        tab = cls(await browser.new_context(viewport=VIEWPORT))
        try:
            await tab.context.set_offline(True)
            # The clock goes first: every script of the page, the probe's too, sees page time.
            await tab.context.add_init_script(script=PROBE_JS)
            await tab.context.route("**/*", tab._route)
            tab.page = page = await tab.context.new_page()
            page.on("console", tab._on_console)
            page.on("pageerror", tab._on_page_error)
            page.on("crash", tab._on_crash)
            tab.context.on("page", tab._on_popup)
            tab.cdp = await tab.context.new_cdp_session(page)
        except BaseException:
            await tab.close()
            raise
        return tab

    @property
    def reusable(self) -> bool:
        """Whether the tab may judge another artifact."""
        return (
            not self.spoiled
            and self.judged < TAB_REUSE
            and self.page is not None
            and not self.page.is_closed()
        )

    async def close(self) -> None:
        """Close the context, and the renderer with it."""
        with contextlib.suppress(PlaywrightError, TimeoutError):
            await asyncio.wait_for(self.context.close(), timeout=LOAD_TIMEOUT_S)

    async def _route(self, route: Route) -> None:
        request, seen = route.request, self.seen
        # Requests can still arrive while the context closes; they need no answer then.
        with contextlib.suppress(PlaywrightError):
            if seen is not None and request.url == seen.url and request.is_navigation_request():
                await route.fulfill(
                    status=200, content_type="text/html; charset=utf-8", body=seen.html
                )
                return
            if seen is not None:
                seen.note(seen.blocked, request.url)
            await route.abort("internetdisconnected")

    def _on_console(self, message: ConsoleMessage) -> None:
        if self.seen is not None:
            self.seen.on_console(message)

    def _on_page_error(self, error: PlaywrightError) -> None:
        if self.seen is not None:
            self.seen.on_page_error(error)

    def _on_crash(self, page: Page) -> None:
        self.spoiled = True
        if self.seen is not None:
            self.seen.on_crash(page)

    async def _on_popup(self, popup: Page) -> None:
        if popup is self.page:
            return
        if self.seen is not None:
            self.seen.note(self.seen.popups, popup.url)
        with contextlib.suppress(PlaywrightError):
            await popup.close()


async def measure_page(
    tab: Tab,
    html: str,
    *,
    warmup_s: float,
    measure_s: float,
    is_alive: Callable[[], bool],
) -> BrowserReport:
    """Load ``html`` offline in ``tab``, then step it through page time.

    Args:
        tab: An open tab, fresh or reused (:attr:`Tab.reusable`).
        html: The artifact, a complete HTML document.
        warmup_s: Seconds of page time stepped before the judged time.
        measure_s: Seconds of page time judged.
        is_alive: Whether the browser process is still up; consulted before blaming the page.

    Returns:
        The report; artifact failures (crash, hang, navigation) are recorded in it.

    Raises:
        StaleTab: The tab was reused and could not load the artifact in time.
        playwright.async_api.Error: The browser failed in a way the artifact cannot cause.
    """
    assert tab.page is not None and tab.cdp is not None, "Tab.open() opens the page"
    started = time.monotonic()
    reused = tab.judged > 0
    tab.judged += 1
    seen = _Observations(html, url=artifact_url(tab.judged))
    if reused:
        await tab.context.clear_cookies()
    tab.seen = seen
    try:
        stepped = await _run_probe(
            tab.page,
            tab.cdp,
            seen,
            warmup_s=warmup_s,
            measure_s=measure_s,
            is_alive=is_alive,
            reused=reused,
        )
        png = None
        if not seen.crashed and not seen.hung:
            png = await _screenshot(tab.page, tab.cdp, seen, is_alive=is_alive)
    finally:
        tab.seen = None
    if stepped is None or seen.navigated or stepped.summary.get("leaveListeners"):
        tab.spoiled = True
    return _report(stepped, seen, png, elapsed_s=time.monotonic() - started)


async def _run_probe(
    page: Page,
    cdp: CDPSession,
    seen: _Observations,
    *,
    warmup_s: float,
    measure_s: float,
    is_alive: Callable[[], bool],
    reused: bool,
) -> Stepped | None:
    try:
        await page.goto(seen.url, wait_until="load", timeout=LOAD_TIMEOUT_S * 1000)
    except PlaywrightTimeoutError as exc:
        if reused and is_alive() and not seen.crashed:
            raise StaleTab(f"a reused tab did not load the next artifact: {exc}") from None
        _blame_page(exc, seen, is_alive=is_alive)
        return None
    except PlaywrightError as exc:
        _blame_page(exc, seen, is_alive=is_alive)
        return None
    try:
        logger.debug("loaded artifact (%d bytes)", len(seen.html))
        stepped = await step_page(
            page, cdp, probe=PROBE_GLOBAL, warmup_s=warmup_s, judged_s=measure_s
        )
    except (PlaywrightError, TimeoutError) as exc:
        _blame_page(exc, seen, is_alive=is_alive)
        return None
    for text in stepped.summary.get("consoleErrors", []):
        seen.note(seen.errors, f"console.error: {text}")
    if stepped.summary.get("leaving"):
        _blame_navigation(seen)
        return None
    return stepped


async def _screenshot(
    page: Page, cdp: CDPSession, seen: _Observations, *, is_alive: Callable[[], bool]
) -> bytes | None:
    try:
        return await (_png_playwright(page) if seen.navigated else _png(cdp))
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
        return await _png_playwright(page)
    except (PlaywrightError, TimeoutError) as exc:
        if not is_alive():
            raise
        # Already blamed for its navigation; it only leaves no screenshot.
        logger.debug("no screenshot after the page's navigation: %s", exc)
        return None


async def _png_playwright(page: Page) -> bytes:
    """A PNG of the viewport through Playwright, which waits for a navigating page's new
    document to show a frame first."""
    return await page.screenshot(type="png", timeout=SCREENSHOT_TIMEOUT_S * 1000)


async def _png(cdp: CDPSession) -> bytes:
    """A PNG of the viewport, encoded for speed: Chromium's default compression costs
    about three times the CPU of the whole capture, for a file about 30% smaller."""
    shot = await asyncio.wait_for(
        cdp.send("Page.captureScreenshot", {"format": "png", "optimizeForSpeed": True}),
        timeout=SCREENSHOT_TIMEOUT_S,
    )
    return base64.b64decode(shot["data"])


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
        _blame_navigation(seen)
    else:
        raise exc


def _blame_navigation(seen: _Observations) -> None:
    seen.navigated = True
    seen.note(seen.errors, "The page navigated away or reloaded itself during measurement.")


def _report(
    stepped: Stepped | None, seen: _Observations, png: bytes | None, *, elapsed_s: float
) -> BrowserReport:
    summary = stepped.summary if stepped is not None else {}
    canvas = summary.get("canvas")
    unmeasured = BrowserReport(
        measured=False,
        window_s=0.0,
        fps=0.0,
        callbacks_per_s=0.0,
        script_ms_per_frame=0.0,
        own_loop_share=0.0,
        display_frames=0,
        page_frames=0,
        draw_calls=0,
        contexts_2d=int(summary.get("contexts2d", 0)),
        canvas_size=(int(canvas[0]), int(canvas[1])) if canvas else None,
        canvas_changed=False,
        errors=tuple(seen.errors),
        blocked_requests=tuple(seen.blocked),
        window_opens=tuple(str(url) for url in summary.get("opens", [])[:MAX_RECORDED]),
        popups=tuple(seen.popups),
        sockets=tuple(str(s) for s in summary.get("sockets", [])[:MAX_RECORDED]),
        crashed=seen.crashed,
        screenshot_png=png,
        screenshot_blank=png_is_blank(png) if png is not None else None,
        elapsed_s=elapsed_s,
        late_window_s=0.0,
        late_fps=0.0,
        late_display_frames=0,
        late_share=0.0,
        early_share=0.0,
        last_frame_s=None,
        change_span_s=0.0,
        canvas_changed_late=False,
        last_change_s=None,
        judged_until_s=0.0,
        watched_until_s=0.0,
        inputs_blocked=int(summary.get("inputsBlocked", 0)),
        input_listeners=tuple(str(kind) for kind in summary.get("inputListeners", [])),
    )
    if stepped is None:
        return unmeasured
    f = frame_figures(stepped)
    return replace(
        unmeasured,
        measured=True,
        window_s=f.window_s,
        fps=_per_s(f.page_frames, f.window_s),
        callbacks_per_s=_per_s(f.callbacks, f.window_s),
        script_ms_per_frame=f.script_ms_per_frame,
        own_loop_share=f.own_loop_share,
        display_frames=f.display_frames,
        page_frames=f.page_frames,
        draw_calls=stepped.judged_draws,
        canvas_changed=f.canvas_changed,
        late_window_s=f.late_window_s,
        late_fps=_per_s(f.late_page_frames, f.late_window_s),
        late_display_frames=f.late_display_frames,
        late_share=_share(f.late_page_frames, f.late_display_frames),
        early_share=_share(
            f.page_frames - f.late_page_frames, f.display_frames - f.late_display_frames
        ),
        last_frame_s=f.last_frame_s,
        change_span_s=f.change_span_s,
        canvas_changed_late=f.canvas_changed_late,
        last_change_s=f.last_change_s,
        judged_until_s=f.judged_until_s,
        watched_until_s=f.watched_until_s,
        frame_ms_p95=f.frame_ms_p95,
        frame_ms_p95_here=f.frame_ms_p95_here,
        speed_scale=stepped.speed_scale,
        cpu_share=stepped.cpu_share,
    )


def _per_s(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0


def _share(part: int, whole: int) -> float:
    return min(1.0, part / whole) if whole > 0 else 0.0
