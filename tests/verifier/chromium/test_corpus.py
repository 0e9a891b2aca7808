"""Every page of the corpus gets exactly the verdict it deserves, on an idle machine and on
one whose every core is busy with other work.

Where each page comes from is in ``pages/PROVENANCE.md``.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from verifier.chromium.browser import Browser
from verifier.chromium.judge import judge

logger = logging.getLogger(__name__)

STATIC = ["size", "canvas_2d", "raf_loop", "no_external_url"]
IN_BROWSER = [
    "fps",
    "frame_cost",
    "own_loop_share",
    "loop_keeps_running",
    "canvas_changes",
    "no_page_errors",
    "no_blocked_requests",
    "no_popups",
    "no_sockets",
    "screenshot_not_blank",
]
#: The browser checks that fail when the page's loop does not run on its own.
NOT_ANIMATING = ["fps", "own_loop_share", "loop_keeps_running", "canvas_changes"]

#: Pages the static checks already refuse: the browser must not be used at all.
STATIC_FAILURES = {
    "cdn_script.html": ["no_external_url"],
    "css_import.html": ["no_external_url"],
    "external_fetch.html": ["no_external_url"],
    "websocket.html": ["no_external_url"],
    "set_interval.html": ["raf_loop"],
}

#: Pages that pass the static checks and are caught (or passed) in Chromium.
BROWSER_VERDICTS = {
    "good.html": [],
    "cdn_script_runtime.html": ["no_blocked_requests"],
    "css_import_runtime.html": ["no_blocked_requests"],
    "external_fetch_runtime.html": ["no_blocked_requests"],
    "websocket_hidden.html": ["no_sockets"],
    "eventsource.html": ["no_page_errors", "no_sockets"],
    "js_error.html": ["no_page_errors"],
    "static_canvas.html": NOT_ANIMATING,
    # a large chart drawn once above a small sparkline that moves every frame: alive
    "still_chart_live_sparkline.html": [],
    "blank.html": ["canvas_changes", "screenshot_not_blank"],
    "popup.html": ["no_popups"],
    "timer_raf.html": ["fps", "own_loop_share"],
    "busy.html": [*NOT_ANIMATING, "no_page_errors", "screenshot_not_blank"],
    # still at 60 fps when a two-second window closes, still from four seconds on
    "loop_stops_after_seconds.html": ["loop_keeps_running", "canvas_changes"],
    # 60 frames, then nothing: too few frames over the judged time, and stopped
    "loop_stops_mid_window.html": ["fps", "loop_keeps_running", "canvas_changes"],
    # the loop starts on the first mousemove, which never reaches the page
    "input_started_loop.html": NOT_ANIMATING,
    # one frame per mousemove and none without
    "input_driven_only.html": NOT_ANIMATING,
    # links and comments name URLs, nothing loads them
    "credit_link.html": [],
    # a string followed by a `//d3.format` comment is no protocol-relative URL
    "comment_after_string.html": [],
    # moves by performance.now() deltas, ticks its data by Date.now(), shows a Date clock
    "wall_clock_animation.html": [],
    # moves a fixed step per frame, reading no clock at all
    "frame_count_animation.html": [],
    # spins 30 ms on performance.now() in every frame: too heavy on any machine
    "heavy_busy_wait.html": ["frame_cost"],
    # computes about 25 ms of script in every frame
    "heavy_compute.html": ["frame_cost"],
    # a few ms per frame: a real-time judge on a loaded machine saw it crawl
    "cheap_many_particles.html": [],
}

#: Real pages from public repositories (``pages/real/PROVENANCE.md``), each with the verdict a
#: person gives it: a self-contained page that keeps animating on its own on a 2D canvas
#: passes, and fails exactly the checks that say what keeps it from that.
REAL_VERDICTS = {
    "real/as-fireworks.html": [],
    "real/as-fourier-epicycles.html": [],
    "real/as-phyllotaxis-accumulating.html": [],
    "real/as-planets-orbits.html": [],
    # changes once a second, by new Date()
    "real/as-ring-clock.html": [],
    "real/as-times-table.html": [],
    "real/es-constellation-quotes.html": [],
    "real/es-flow-field-trails.html": [],
    "real/es-golden-ratio-particles.html": [],
    "real/lbm-fractal-tree-sway.html": [],
    "real/lbm-traffic-sim-gpt52.html": [],
    # the queue stands still through each 4 s red light, then moves on
    "real/lbm-traffic-light-reference.html": [],
    # every pixel computed in script in every frame
    "real/lbm-wave-interference-per-pixel.html": ["frame_cost"],
    "real/lbm-conway-setinterval.html": ["raf_loop"],
    "real/lbm-sorting-race-settimeout.html": ["raf_loop"],
    "real/gauge-drawn-once.html": ["raf_loop"],
    "real/as-lsystem-tree-keypress.html": ["raf_loop"],
    "real/es-simplex-noise-cdn.html": ["no_external_url"],
    "real/es-threejs-cdn-webgl.html": ["canvas_2d", "no_external_url"],
    # follows the mouse, and sits still without it
    "real/as-mouse-follower.html": ["canvas_changes"],
    "real/mdn-drawing-app-mouse-only.html": ["canvas_changes"],
    # its loop starts once a sprite sheet loads from the network
    "real/mdn-walking-sprite-image.html": [
        *NOT_ANIMATING[:3],
        "canvas_changes",
        "no_blocked_requests",
        "screenshot_not_blank",
    ],
    # the first frame throws before it asks for the next
    "real/lbm-particle-gravity-addcolorstop-error.html": [*NOT_ANIMATING, "no_page_errors"],
    # the loop starts once a camera delivers a stream; without one it never does
    "real/as-webcam-mosaic.html": [*NOT_ANIMATING, "screenshot_not_blank"],
    # draws its whole maze within the warm-up, then logs half a million lines and stops
    "real/as-10print-raf-fanout.html": NOT_ANIMATING,
}

#: What a failing check must say (a regular expression), for pages whose hint used to point
#: at the wrong fix. The stop times are those of an idle machine, with room for a busy one.
EXPECTED_HINTS = {
    "loop_stops_after_seconds.html": ("loop_keeps_running", r"stopped (3\.9|4\.\d) s after load"),
    "loop_stops_mid_window.html": ("fps", r"because it stopped (0\.\d|1\.\d|2\.\d) s after"),
    "input_started_loop.html": ("own_loop_share", r"waits for input \(it listens for mousemove\)"),
    "input_driven_only.html": ("fps", r"waits for input \(it listens for mousemove\)"),
}

#: The one thing each page does wrong, as the check's measured value shows it.
EXPECTED_VALUES = {
    "cdn_script_runtime.html": ("no_blocked_requests", ["https://cdn.jsdelivr.net/npm/chart.js"]),
    "css_import_runtime.html": (
        "no_blocked_requests",
        ["https://fonts.googleapis.com/css2?family=Inter"],
    ),
    "external_fetch_runtime.html": (
        "no_blocked_requests",
        ["https://api.example.com/prices.json"],
    ),
    "websocket_hidden.html": ("no_sockets", ["WebSocket wss://feed.example.com/live"]),
    "eventsource.html": ("no_sockets", ["EventSource https://events.example.com/stream"]),
    "js_error.html": (
        "no_page_errors",
        ["TypeError: Cannot read properties of undefined (reading 'map')"],
    ),
    "popup.html": ("no_popups", {"window_open": ["about:blank"], "popups": []}),
}


class _NoBrowser:
    """Stands in for Browser where the static checks must stop the page first."""

    def measure(self, html: str, **_: object) -> object:
        raise AssertionError("the browser was used for a page that fails its static checks")


@pytest.mark.parametrize(("name", "failed"), STATIC_FAILURES.items())
def test_static_failures_never_reach_the_browser(
    page_html: Callable[[str], str], name: str, failed: list[str]
) -> None:
    # Given a page with a defect visible in its source
    # When it is judged
    verdict = judge(page_html(name), browser=_NoBrowser())  # type: ignore[arg-type]
    # Then exactly that static check fails and no browser check exists
    assert not verdict.passed
    assert verdict.failed == failed
    assert [check.name for check in verdict.checks] == STATIC
    assert verdict.fps is None
    assert verdict.screenshot_png is None


@pytest.mark.browser
@pytest.mark.parametrize(("name", "failed"), BROWSER_VERDICTS.items())
def test_browser_verdicts(
    browser: Browser,
    page_html: Callable[[str], str],
    min_fps: float,
    name: str,
    failed: list[str],
) -> None:
    # Given a page that passes the static checks
    html = page_html(name)
    # When it is judged in Chromium
    verdict = judge(html, browser=browser, min_fps=min_fps)
    logger.info(
        "%s: %s, fps %s, frame cost %s ms",
        name,
        verdict.failed,
        verdict.fps,
        next(c.value for c in verdict.checks if c.name == "frame_cost"),
    )
    # Then exactly the checks it deserves fail, after all static and browser checks ran
    assert [check.name for check in verdict.checks] == STATIC + IN_BROWSER
    assert verdict.failed == failed, [c.detail for c in verdict.checks if not c.passed]
    assert verdict.passed is (not failed)
    assert verdict.fps is not None
    if name in EXPECTED_VALUES:
        check_name, value = EXPECTED_VALUES[name]
        assert next(c.value for c in verdict.checks if c.name == check_name) == value
    if name in EXPECTED_HINTS:
        check_name, hint = EXPECTED_HINTS[name]
        assert re.search(hint, next(c.detail for c in verdict.checks if c.name == check_name))
    for check in verdict.checks:
        if not check.passed and name != "timer_raf.html":
            assert "setTimeout" not in check.detail, check
    for check in verdict.checks:
        assert check.detail.endswith("."), check


@pytest.mark.browser
@pytest.mark.parametrize(("name", "failed"), REAL_VERDICTS.items())
def test_real_pages_get_the_verdict_a_person_gives(
    browser: Browser, page_html: Callable[[str], str], min_fps: float, name: str, failed: list[str]
) -> None:
    # Given a page taken unchanged from a public repository
    # When it is judged
    verdict = judge(page_html(name), browser=browser, min_fps=min_fps)
    # Then exactly the checks a person would fail it for fail, each saying why
    assert verdict.failed == failed, [c.detail for c in verdict.checks if not c.passed]
    assert all(check.detail.endswith(".") for check in verdict.checks)


@pytest.mark.browser
def test_good_page_report(
    browser: Browser, page_html: Callable[[str], str], min_fps: float
) -> None:
    # Given the good dashboard
    html = page_html("good.html")
    # When it is measured
    report = browser.measure(html)
    # Then its own loop drives every frame of a full-window canvas that changes, at 60 fps
    # of page time, cheaply
    logger.info("good.html measured in %.2fs at %.1f fps", report.elapsed_s, report.fps)
    assert report.measured
    assert report.fps == pytest.approx(60.0)
    assert report.display_frames == 330
    assert 0 < report.frame_ms_p95 < 5.0
    assert report.own_loop_share >= 0.9
    assert report.callbacks_per_s == pytest.approx(report.fps, rel=0.05)
    assert report.canvas_size == (1280, 800)
    assert report.canvas_changed
    assert report.contexts_2d == 1
    assert report.draw_calls > 100
    assert report.errors == report.blocked_requests == report.sockets == ()
    assert report.window_opens == report.popups == ()
    assert not report.crashed
    assert report.screenshot_png is not None
    assert report.screenshot_png.startswith(b"\x89PNG")
    assert report.screenshot_blank is False
    assert report.late_fps >= min_fps
    assert report.canvas_changed_late
    assert report.judged_until_s >= 6.0
    # 6 s of page time cost far less than 6 s of real time
    assert report.elapsed_s < 6.0


def _reloading_page(*, reload_after_ms: int, busy_ms: int = 0) -> str:
    """A page that reloads itself once, ``reload_after_ms`` after it first loads; its second
    document keeps its main thread busy for ``busy_ms`` before it can paint."""
    return (
        "<head><script>if (sessionStorage.getItem('seen')) {"
        f" const t = Date.now(); while (Date.now() - t < {busy_ms}) {{}} }}"
        " else { sessionStorage.setItem('seen', '1');"
        f" setTimeout(() => location.reload(), {reload_after_ms}); }}</script></head>"
        "<body><canvas></canvas></body>"
    )


@pytest.mark.browser
@pytest.mark.parametrize(
    ("html", "measure_s"),
    [
        # half a second into the measurement
        (_reloading_page(reload_after_ms=1000), 1.0),
        # during the warm-up, its screenshot then coming while the second document loads
        (_reloading_page(reload_after_ms=100, busy_ms=300), 0.5),
        (_reloading_page(reload_after_ms=100, busy_ms=1500), 0.5),
    ],
    ids=["in the window", "loading 0.3 s", "loading 1.5 s"],
)
def test_reloading_during_the_measurement_is_the_pages_fault(
    browser: Browser, html: str, measure_s: float
) -> None:
    # Given a page that reloads itself once
    # When it is measured
    report = browser.measure(html, warmup_s=0.5, measure_s=measure_s)
    # Then the page is blamed, not the browser, and the reload was served the same
    # document, not blocked, and photographed once loaded
    assert not report.measured
    assert report.errors == ("The page navigated away or reloaded itself during measurement.",)
    assert report.blocked_requests == ()
    assert report.screenshot_png is not None


@pytest.mark.browser
def test_link_popups_are_closed_and_recorded(browser: Browser) -> None:
    # Given a page that opens a window through a target=_blank link, not window.open
    html = (
        "<canvas></canvas><script>const a = document.createElement('a');"
        " a.href = 'about:blank#details'; a.target = '_blank';"
        " document.body.appendChild(a); a.click();</script>"
    )
    # When it is measured
    report = browser.measure(html, warmup_s=0.2, measure_s=0.3)
    # Then the popup that appeared is recorded (and was closed at once)
    assert len(report.popups) == 1
    assert report.window_opens == ()


@pytest.mark.browser
def test_page_that_never_finishes_loading_is_blamed(
    browser: Browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a page whose inline script never returns, and a short load timeout
    monkeypatch.setattr("verifier.chromium.page.LOAD_TIMEOUT_S", 2.0)
    html = "<canvas></canvas><script>for (;;) {}</script>"
    # When it is measured
    report = browser.measure(html, warmup_s=0.1, measure_s=0.2)
    # Then the page is reported unresponsive, not the browser unavailable
    assert not report.measured
    assert report.errors[0].startswith("The page stopped responding")
    assert report.screenshot_png is None


@pytest.mark.browser
def test_events_a_page_dispatches_itself_still_reach_it(browser: Browser, min_fps: float) -> None:
    # Given a page whose loop starts on a mousemove that the page dispatches itself
    html = (
        "<canvas width=200 height=100></canvas><script>"
        "const ctx = document.querySelector('canvas').getContext('2d');"
        "function frame(t) { ctx.fillStyle = `hsl(${t / 10 % 360}, 80%, 50%)`;"
        " ctx.fillRect(0, 0, 200, 100); requestAnimationFrame(frame); }"
        "addEventListener('mousemove', () => requestAnimationFrame(frame), { once: true });"
        "dispatchEvent(new MouseEvent('mousemove'));</script>"
    )
    # When it is measured
    report = browser.measure(html)
    # Then only the browser's trusted input was kept from it: its own event started the loop
    assert report.inputs_blocked > 0
    assert report.input_listeners == ("mousemove",)
    assert report.fps >= min_fps
    assert report.late_fps > 0
    assert report.canvas_changed_late


@pytest.mark.browser
def test_a_loop_that_starts_late_is_judged_on_its_own_frames(
    browser: Browser, min_fps: float
) -> None:
    # Given a page that shows a still splash for 1.5 s, then starts its rAF loop for good
    html = (
        "<canvas width=200 height=100></canvas><script>"
        "const ctx = document.querySelector('canvas').getContext('2d');"
        "ctx.fillRect(0, 0, 200, 100);"
        "function frame(t) { ctx.fillStyle = `hsl(${t / 10 % 360}, 80%, 50%)`;"
        " ctx.fillRect(0, 0, 200, 100); requestAnimationFrame(frame); }"
        "setTimeout(() => requestAnimationFrame(frame), 1500);</script>"
    )
    # When it is judged
    verdict = judge(html, browser=browser, min_fps=min_fps)
    # Then it passes: the timer only delayed the start, every frame after it was its own
    assert verdict.passed, [c.detail for c in verdict.checks if not c.passed]


#: Busy processes started per core while the corpus is judged the second time.
BUSY_PER_CORE = 2


@contextmanager
def every_core_busy() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Keep every core busy with other processes (BUSY_PER_CORE spinning ones per core)."""
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(BUSY_PER_CORE * (os.cpu_count() or 1))
    ]
    try:
        yield spinners
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_corpus_gets_the_same_verdicts_on_an_idle_and_on_a_saturated_machine(
    browser: Browser, page_html: Callable[[str], str], min_fps: float
) -> None:
    # Given every page the browser judges, written for the corpus or real
    names = [
        *BROWSER_VERDICTS,
        *(name for name, failed in REAL_VERDICTS.items() if not set(failed) & set(STATIC)),
    ]

    def verdicts() -> dict[str, list[str]]:
        return {
            name: judge(page_html(name), browser=browser, min_fps=min_fps).failed for name in names
        }

    # When the corpus is judged on this machine as it is, then with every core kept busy
    idle = verdicts()
    with every_core_busy() as spinners:
        loaded = verdicts()
        still_spinning = all(spinner.poll() is None for spinner in spinners)
    # Then every page gets the same verdict both ways, the one it deserves
    logger.info("idle: %s", idle)
    logger.info("loaded: %s", loaded)
    assert still_spinning
    assert loaded == idle
    assert idle == {name: {**BROWSER_VERDICTS, **REAL_VERDICTS}[name] for name in names}


def _pausing_page(*, resumes: bool) -> str:
    """A page whose colour changes every frame, stands still from 4.5 s of page time while
    its loop runs on, and (``resumes``) changes again from 8 s."""
    moving = "t < 4500 || t >= 8000" if resumes else "t < 4500"
    return (
        "<canvas width=200 height=100></canvas><script>"
        "const ctx = document.querySelector('canvas').getContext('2d');"
        "function frame(t) { if (" + moving + ") { ctx.fillStyle = `hsl(${t / 10 % 360}, "
        "80%, 50%)`; ctx.fillRect(0, 0, 200, 100); } requestAnimationFrame(frame); }"
        "requestAnimationFrame(frame);</script>"
    )


@pytest.mark.browser
def test_a_canvas_that_pauses_is_told_from_one_that_stopped(
    browser: Browser, min_fps: float
) -> None:
    # Given two pages whose canvas stands still from 4.5 s while their loops run on, one of
    # which moves again from 8 s, past the judged time
    # When both are judged
    paused = judge(_pausing_page(resumes=True), browser=browser, min_fps=min_fps)
    stopped = judge(_pausing_page(resumes=False), browser=browser, min_fps=min_fps)
    # Then the one that moves again passes, saying it paused, and the other fails after it
    # was watched for as long again, saying so
    assert paused.passed, [c.detail for c in paused.checks if not c.passed]
    change = next(c for c in paused.checks if c.name == "canvas_changes")
    assert re.search(r"changed again at 8\.\d s: the page paused", change.detail)
    assert stopped.failed == ["canvas_changes"]
    still = next(c for c in stopped.checks if c.name == "canvas_changes")
    assert re.search(r"stopped changing 4\.\d s after load .* up to 12\.\d s", still.detail)


@pytest.mark.browser
def test_a_page_is_a_secure_context_as_a_file_is(browser: Browser, min_fps: float) -> None:
    # Given a page that names its data with crypto.randomUUID(), which only a secure context
    # (a file opened in a browser, https, localhost) has
    html = (
        "<canvas width=200 height=100></canvas><script>"
        "const id = crypto.randomUUID(); const ctx = document.querySelector('canvas')"
        ".getContext('2d'); function frame(t) { ctx.fillStyle = `hsl(${t / 10 % 360}, 80%, "
        "50%)`; ctx.fillRect(0, 0, 200, 100); ctx.fillStyle = '#fff'; ctx.fillText(id, 4, 50);"
        " requestAnimationFrame(frame); } requestAnimationFrame(frame);</script>"
    )
    # When it is judged
    verdict = judge(html, browser=browser, min_fps=min_fps)
    # Then it runs as it does from a file: without errors
    assert verdict.passed, [c.detail for c in verdict.checks if not c.passed]


@pytest.mark.browser
def test_a_page_that_floods_its_console_holds_up_nothing_after_it(
    browser: Browser, page_html: Callable[[str], str], min_fps: float
) -> None:
    # Given a page that logs half a million lines as it loads, and reports one error
    html = (
        "<canvas></canvas><script>console.error('first', {n: 1});"
        "for (let i = 0; i < 500000; i++) console.log('line', i);</script>"
    )
    # When it is measured, and the good dashboard after it
    report = browser.measure(html, warmup_s=0.1, measure_s=0.5)
    verdict = judge(page_html("good.html"), browser=browser, min_fps=min_fps)
    # Then the flood is measured like any page, its error kept, and the next page judged
    assert report.measured
    assert report.errors == ('console.error: first {"n":1}',)
    assert verdict.passed, [c.detail for c in verdict.checks if not c.passed]
