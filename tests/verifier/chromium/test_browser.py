"""The shared Chromium: crashes, relaunches, concurrency, xvfb and shutdown."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import psutil
import pytest

import verifier.chromium.binary
from verifier.chromium.binary import DEFAULT_CHROMIUM_PATH, HEADLESS_SHELL_PATH, default_executable
from verifier.chromium.browser import Browser, BrowserUnavailable, find_root
from verifier.chromium.judge import Verdict, judge
from verifier.chromium.page import Tab, measure_page

logger = logging.getLogger(__name__)

XVFB = "/usr/bin/Xvfb"
#: Seconds between two samples of Chromium's memory (a sampling rate, not a wait for work).
RSS_SAMPLE_INTERVAL_S = 0.1


class _OnLoaded(logging.Handler):
    """Runs ``action`` on the browser thread as soon as an artifact has loaded."""

    def __init__(self, action: Callable[[], None]) -> None:
        super().__init__(logging.DEBUG)
        self.action = action
        self.fired = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("loaded artifact"):
            self.fired += 1
            self.action()


@contextmanager
def on_loaded(action: Callable[[], None]) -> Iterator[_OnLoaded]:
    """Hook ``action`` onto the ``loaded artifact`` debug line of ``verifier.chromium.page``."""
    page_logger = logging.getLogger("verifier.chromium.page")
    handler, level = _OnLoaded(action), page_logger.level
    page_logger.setLevel(logging.DEBUG)
    page_logger.addHandler(handler)
    try:
        yield handler
    finally:
        page_logger.removeHandler(handler)
        page_logger.setLevel(level)


def _renderers(browser: Browser) -> list[psutil.Process]:
    found = []
    for pid in browser.browser_pids():
        try:
            process = psutil.Process(pid)
            if "--type=renderer" in process.cmdline():
                found.append(process)
        except psutil.Error:
            continue
    return found


@pytest.fixture
def private_browser() -> Iterator[Browser]:
    """A browser of the test's own, free to be killed."""
    with Browser(max_pages=1) as own:
        yield own


@pytest.mark.browser
def test_killed_browser_raises_then_relaunches(
    private_browser: Browser, page_html: Callable[[str], str]
) -> None:
    # Given a running browser whose root process is killed while a page is being measured
    html = page_html("good.html")
    private_browser.measure(html, warmup_s=0.1, measure_s=0.2)
    old_root = private_browser.browser_pids()[0]

    def kill_root() -> None:
        psutil.Process(old_root).kill()

    # When the measurement goes on
    with on_loaded(kill_root) as hook, pytest.raises(BrowserUnavailable):
        private_browser.measure(html)
    # Then it raised BrowserUnavailable, and the next measurement relaunches and succeeds
    assert hook.fired == 1
    report = private_browser.measure(html)
    assert report.measured and report.own_loop_share >= 0.9
    assert not report.errors
    assert private_browser.browser_pids()[0] != old_root


@pytest.mark.browser
def test_crashed_tab_is_the_artifacts_failure(
    private_browser: Browser, page_html: Callable[[str], str]
) -> None:
    # Given a page whose renderer process dies once it has loaded
    html = page_html("good.html")
    private_browser.measure(html, warmup_s=0.1, measure_s=0.2)
    root = private_browser.browser_pids()[0]

    killed: list[int] = []

    def kill_renderers() -> None:
        for renderer in _renderers(private_browser):
            renderer.kill()
            killed.append(renderer.pid)

    # When it is judged
    with on_loaded(kill_renderers):
        verdict = judge(html, browser=private_browser)
    # Then the page is blamed in the verdict, and the same browser measures the next page
    assert killed
    assert verdict.failed == [
        "fps",
        "own_loop_share",
        "loop_keeps_running",
        "canvas_changes",
        "no_page_errors",
        "screenshot_not_blank",
    ]
    errors = next(check.value for check in verdict.checks if check.name == "no_page_errors")
    assert errors == ["The page crashed its browser tab (out of memory or a renderer fault)."]
    assert private_browser.measure(html).own_loop_share >= 0.9
    assert private_browser.browser_pids()[0] == root


#: A page that leaves what it can behind it: storage, a cookie of the whole artifact
#: domain, a window name and a global.
_LEAVES_TRACES = """<!doctype html><canvas></canvas><script>
localStorage.setItem("k", "left"); sessionStorage.setItem("k", "left");
document.cookie = "k=left; domain=artifact.localhost; path=/"; window.name = "left";
window.leftover = "left";
if (!document.cookie.includes("k=left")) console.error("the cookie was refused");
</script>"""
#: A page that reports, as a console error, what it finds of the one before it.
_LOOKS_FOR_TRACES = """<!doctype html><canvas></canvas><script>
console.error("found " + JSON.stringify([localStorage.getItem("k"),
  sessionStorage.getItem("k"), document.cookie, window.name, window.leftover || ""]));
</script>"""
_FOUND_NOTHING = 'console.error: found [null,null,"","",""]'


@pytest.mark.browser
def test_a_tab_judges_the_next_artifact_as_a_new_document(private_browser: Browser) -> None:
    # Given a page that leaves storage, a cookie, a window name and a global behind it
    before = private_browser.measure(_LEAVES_TRACES, warmup_s=0.1, measure_s=0.2)
    assert before.measured and not before.errors
    renderers = [process.pid for process in _renderers(private_browser)]
    # When the next artifact is judged
    after = private_browser.measure(_LOOKS_FOR_TRACES, warmup_s=0.1, measure_s=0.2)
    # Then it ran in the same renderer, and found none of it
    assert [process.pid for process in _renderers(private_browser)] == renderers
    assert len(renderers) == 1
    assert after.errors == (_FOUND_NOTHING,)


@pytest.mark.browser
@pytest.mark.parametrize(
    "leave",
    [
        'addEventListener("pagehide", () => { for (;;) {} })',
        'document.addEventListener("visibilitychange", () => { for (;;) {} })',
        "window.onunload = () => { for (;;) {} }",
    ],
)
def test_a_page_that_runs_code_when_left_is_not_followed_in_its_tab(
    private_browser: Browser, leave: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a page whose handler loops for ever once its document is left
    html = f"<!doctype html><canvas></canvas><script>{leave}</script>"
    assert private_browser.measure(html, warmup_s=0.1, measure_s=0.2).measured
    renderers = {process.pid for process in _renderers(private_browser)}
    # When the next artifact is judged
    with caplog.at_level(logging.INFO, logger="verifier.chromium.browser"):
        after = private_browser.measure(_LOOKS_FOR_TRACES, warmup_s=0.1, measure_s=0.2)
    # Then it is judged in a tab of its own from the start, not blamed for the loop
    assert "fresh tab" not in caplog.text
    assert after.measured
    assert after.errors == (_FOUND_NOTHING,)
    assert not renderers & {process.pid for process in _renderers(private_browser)}


@pytest.mark.browser
def test_a_tab_left_idle_is_closed(
    private_browser: Browser, page_html: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a browser that closes tabs idle for a fifth of a second
    monkeypatch.setattr("verifier.chromium.browser.TAB_IDLE_S", 0.2)
    # When a page has been judged and nothing follows it
    assert private_browser.measure(page_html("good.html"), warmup_s=0.1, measure_s=0.2).measured
    renderers = _renderers(private_browser)
    assert renderers
    # Then its tab's renderer exits, and the next page is judged in a fresh tab
    _, alive = psutil.wait_procs(renderers, timeout=30)
    assert not alive
    assert private_browser.measure(page_html("good.html")).own_loop_share >= 0.9


@pytest.mark.browser
def test_a_reused_tab_that_cannot_load_gives_way_to_a_fresh_one(
    private_browser: Browser, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a tab kept for reuse although its page loops for ever once it is left
    monkeypatch.setattr(Tab, "reusable", property(lambda tab: not tab.page.is_closed()))
    html = "<!doctype html><canvas></canvas><script>onpagehide = () => { for (;;) {} }</script>"
    assert private_browser.measure(html, warmup_s=0.1, measure_s=0.2).measured
    # When the next artifact cannot load in it
    with caplog.at_level(logging.INFO, logger="verifier.chromium.browser"):
        after = private_browser.measure(_LOOKS_FOR_TRACES, warmup_s=0.1, measure_s=0.2)
    # Then it is measured again in a fresh tab, and not blamed as hung
    assert after.measured
    assert after.errors == (_FOUND_NOTHING,)
    assert "measuring it in a fresh tab" in caplog.text


@pytest.mark.browser
def test_concurrent_judging(
    page_html: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given one browser measuring at most 4 pages, and 8 threads with a page each
    names = [
        "good.html",
        "good.html",
        "js_error.html",
        "popup.html",
        "blank.html",
        "static_canvas.html",
        "external_fetch_runtime.html",
        "websocket_hidden.html",
    ]
    in_flight, peak_pages = 0, 0

    async def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal in_flight, peak_pages
        in_flight += 1  # Only the browser's own thread runs this: no lock needed.
        peak_pages = max(peak_pages, in_flight)
        try:
            return await measure_page(*args, **kwargs)
        finally:
            in_flight -= 1

    monkeypatch.setattr("verifier.chromium.browser.measure_page", counting)
    done, peak_rss, peak_pss = threading.Event(), 0, 0
    with Browser(max_pages=4) as shared:

        def sample_memory() -> None:
            nonlocal peak_rss, peak_pss
            while not done.wait(RSS_SAMPLE_INTERVAL_S):
                rss = pss = 0
                for pid in shared.browser_pids():
                    try:
                        memory = psutil.Process(pid).memory_full_info()
                    except psutil.Error:
                        continue
                    rss, pss = rss + memory.rss, pss + memory.pss
                peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)

        sampler = threading.Thread(target=sample_memory, name="memory-sampler")
        sampler.start()
        # When all threads judge at once
        started = time.monotonic()
        try:
            with ThreadPoolExecutor(max_workers=len(names)) as pool:
                verdicts: list[Verdict] = list(
                    pool.map(
                        lambda name: judge(page_html(name), browser=shared),
                        names,
                    )
                )
        finally:
            done.set()
            sampler.join()
        elapsed_s = time.monotonic() - started
    # Then every page is judged in the browser, never more than 4 at a time
    logger.info(
        "%d pages, 4 at a time: %.1fs, %.1f pages/minute; Chromium tree peak RSS %.0f MB"
        " (summed, shared pages counted per process), peak PSS %.0f MB",
        len(names),
        elapsed_s,
        len(names) / elapsed_s * 60,
        peak_rss / 2**20,
        peak_pss / 2**20,
    )
    assert peak_pages == 4
    assert peak_rss > 0
    for name, verdict in zip(names, verdicts, strict=True):
        assert len(verdict.checks) == 14, name
        assert verdict.fps is not None, name
    by_name = dict(zip(names, verdicts, strict=True))
    # Each page's defect is found with three other pages sharing the cores.
    assert "no_page_errors" in by_name["js_error.html"].failed
    assert "no_popups" in by_name["popup.html"].failed
    assert "screenshot_not_blank" in by_name["blank.html"].failed
    assert "canvas_changes" in by_name["static_canvas.html"].failed
    assert "no_blocked_requests" in by_name["external_fetch_runtime.html"].failed
    assert "no_sockets" in by_name["websocket_hidden.html"].failed


@pytest.mark.browser
def test_close_during_a_measurement_fails_it(
    private_browser: Browser, page_html: Callable[[str], str]
) -> None:
    # Given a measurement under way on another thread
    loaded = threading.Event()
    outcome: list[BaseException | None] = []

    def measure() -> None:
        try:
            private_browser.measure(page_html("good.html"))
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    with on_loaded(loaded.set):
        worker = threading.Thread(target=measure)
        worker.start()
        assert loaded.wait(60)
        # When the browser is closed under it
        private_browser.close()
        worker.join(60)
    # Then the measurement fails as an infrastructure fault instead of hanging
    assert len(outcome) == 1
    assert isinstance(outcome[0], BrowserUnavailable)
    assert private_browser.browser_pids() == []


def _driver_of(browser: Browser) -> psutil.Process:
    """The Playwright driver that launched ``browser``'s Chromium."""
    process = psutil.Process(browser.browser_pids()[0])
    while "run-driver" not in process.cmdline():
        parent = process.parent()
        assert parent is not None, "Chromium was not launched by a Playwright driver"
        process = parent
    return process


@pytest.mark.browser
@pytest.mark.parametrize("stop", ["close", "sigterm"])
def test_a_shutdown_while_pages_are_judged_logs_nothing_at_error(
    stop: str, page_html: Callable[[str], str], caplog: pytest.LogCaptureFixture
) -> None:
    # Given a browser judging two pages on other threads, with a third waiting for a slot
    shared = Browser(max_pages=2)
    loaded = threading.Semaphore(0)
    # Only the kinds: an exception kept would keep what its frames hold from being collected
    outcomes: list[type[BaseException] | None] = []

    def measure() -> None:
        try:
            shared.measure(page_html("good.html"))
            outcomes.append(None)
        except BaseException as exc:
            outcomes.append(type(exc))

    threads = [threading.Thread(target=measure) for _ in range(3)]
    with on_loaded(loaded.release):
        for thread in threads:
            thread.start()
        assert loaded.acquire(timeout=60) and loaded.acquire(timeout=60)
        # When the worker stops: its browser is closed under the measurements, or first the
        # SIGTERM a stopped service sends its whole group reaches the driver and Chromium
        if stop == "sigterm":
            driver = _driver_of(shared)
            tree = [driver, *driver.children(recursive=True)]
            for process in tree:
                with contextlib.suppress(psutil.Error):
                    process.terminate()
            psutil.wait_procs(tree, timeout=30)
            for thread in threads:
                thread.join(60)
        shared.close()
        for thread in threads:
            thread.join(60)
    gc.collect()
    # Then every measurement failed as the browser's fault, and nothing was logged at ERROR:
    # no future of the browser's loop was left with an exception nobody read
    assert outcomes == [BrowserUnavailable] * 3
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert "never retrieved" not in caplog.text
    # and a driver that died under them was one warning
    assert ("driver went away" in caplog.text) is (stop == "sigterm")


@pytest.mark.browser
@pytest.mark.skipif(not os.path.exists(XVFB), reason=f"{XVFB} is not installed")
def test_xvfb_display(page_html: Callable[[str], str], min_fps: float) -> None:
    # Given a browser rendering headed on a virtual X display
    with Browser(display="xvfb", max_pages=1) as headed:
        # When the good page is judged
        verdict = judge(page_html("good.html"), browser=headed, min_fps=min_fps)
    # Then it passes exactly as it does headless
    assert verdict.passed, [c.detail for c in verdict.checks if not c.passed]


@pytest.mark.browser
def test_missing_chromium_is_unavailable(page_html: Callable[[str], str]) -> None:
    # Given a browser pointed at a binary that does not exist
    # When a page that needs the browser is judged
    # Then the browser, not the page, is reported unavailable
    with (
        Browser(executable_path="/nonexistent/chromium") as missing,
        pytest.raises(BrowserUnavailable, match="could not launch Chromium"),
    ):
        judge(page_html("good.html"), browser=missing)


@pytest.mark.browser
def test_closed_browser_refuses_work(page_html: Callable[[str], str]) -> None:
    # Given a browser that has measured a page and was closed twice
    shared = Browser(max_pages=1)
    shared.measure(page_html("good.html"), warmup_s=0.1, measure_s=0.2)
    pids = shared.browser_pids()
    shared.close()
    shared.close()
    # When it is asked for another measurement
    # Then it refuses, and its processes are gone
    with pytest.raises(BrowserUnavailable, match="closed"):
        shared.measure(page_html("good.html"))
    assert not [pid for pid in pids if psutil.pid_exists(pid) and _running(pid)]


def _args(pid: int) -> list[str]:
    try:
        return list(psutil.Process(pid).cmdline())
    except psutil.Error:  # a renderer that has just exited
        return []


def _running(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def test_display_must_be_known() -> None:
    with pytest.raises(ValueError, match="display"):
        Browser(display="wayland")  # type: ignore[arg-type]


@pytest.mark.browser
@pytest.mark.parametrize(
    "chromium", [HEADLESS_SHELL_PATH, DEFAULT_CHROMIUM_PATH], ids=["headless-shell", "chromium"]
)
def test_both_headless_builds(
    chromium: str, page_html: Callable[[str], str], min_fps: float
) -> None:
    if not os.path.exists(chromium) and not os.environ.get("CI"):
        pytest.skip(f"{chromium} is not installed")
    # Given a browser on one of Debian's two headless builds (one launcher execs the
    # browser, the other runs it as a child)
    with Browser(executable_path=chromium, max_pages=1) as own:
        # When the good page is judged
        verdict = judge(page_html("good.html"), browser=own, min_fps=min_fps)
        root = psutil.Process(own.browser_pids()[0])
        # Then it passes, and the tree sampled for memory is rooted at the browser itself,
        # not at its launcher script
        assert verdict.passed, [c.detail for c in verdict.checks if not c.passed]
        assert os.path.dirname(root.exe()) == "/usr/lib/chromium"
        assert "--type=zygote" in [arg for pid in own.browser_pids()[1:] for arg in _args(pid)]


def test_default_executable(monkeypatch: pytest.MonkeyPatch) -> None:
    # Headed rendering needs the full browser; headless prefers the shell when installed
    assert default_executable("xvfb") == DEFAULT_CHROMIUM_PATH
    installed = os.path.exists(HEADLESS_SHELL_PATH)
    assert default_executable("headless") == (
        HEADLESS_SHELL_PATH if installed else DEFAULT_CHROMIUM_PATH
    )
    monkeypatch.setattr(verifier.chromium.binary, "HEADLESS_SHELL_PATH", "/nonexistent/shell")
    assert default_executable("headless") == DEFAULT_CHROMIUM_PATH


#: A launcher script that runs its program as a child, as chromium-headless-shell's does.
_LAUNCHER = '"$@"; exit'
#: A browser stand-in: one helper forked and not yet exec'd, one exec'd with ``--type=``.
_BROWSER = """
import os, subprocess, sys
marker = sys.argv[1]
helper = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()",
                           marker, "--type=utility"], stdin=subprocess.PIPE)
read, write = os.pipe()
if os.fork() == 0:
    os.close(write)
    os.read(read, 1)
    os._exit(0)
print(helper.pid, flush=True)
sys.stdin.read()
os.close(write)
helper.stdin.close()
helper.wait()
"""


def test_find_root_skips_the_launcher_and_helpers_not_yet_exec_d() -> None:
    # Given a launcher script running a browser whose helpers carry its marker
    marker = "--swarm-browser=find-root-test"
    command = ["/bin/sh", "-c", _LAUNCHER, "sh", sys.executable, "-c", _BROWSER, marker]
    with subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as launcher:
        assert launcher.stdin is not None and launcher.stdout is not None
        helper = int(launcher.stdout.readline())
        # When its root is looked for
        root = find_root(marker)
        # Then it is the browser: not the script, the exec'd helper or the forked copy
        assert root is not None
        assert root.ppid() == launcher.pid
        assert root.cmdline() == [sys.executable, "-c", _BROWSER, marker]
        children = [child.pid for child in root.children()]
        assert helper in children and len(children) == 2
        launcher.stdin.close()
    assert find_root(marker) is None
