"""One long-lived Chromium per process, shared by any number of threads.

Playwright binds itself to the thread and event loop that started it, while Celery's threads
pool calls us from many threads. So :class:`Browser` owns one daemon thread running an asyncio
loop with Playwright's async API; :meth:`Browser.measure` hands each artifact to that loop with
:func:`asyncio.run_coroutine_threadsafe` and blocks on the result. A semaphore on the loop
bounds how many pages are measured at once. Chromium is launched on first use and relaunched
when it has crashed or disconnected; a failure of the browser itself raises
:class:`BrowserUnavailable` and is never blamed on the artifact.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from types import TracebackType

import psutil
from playwright.async_api import Browser as PlaywrightBrowser
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Playwright, async_playwright
from pyvirtualdisplay.display import Display

from verifier.chromium.binary import (
    DisplayMode,
    default_executable,
    launch_options,
    resolve_sandbox,
)
from verifier.chromium.clock import step_budget_s
from verifier.chromium.page import (
    JUDGED_S,
    LOAD_TIMEOUT_S,
    WARMUP_S,
    BrowserReport,
    StaleTab,
    Tab,
    measure_page,
)
from worker.errors import BrowserUnavailable

__all__ = ["Browser", "BrowserReport", "BrowserUnavailable", "DisplayMode"]

logger = logging.getLogger(__name__)

#: Size of the virtual screen for ``display="xvfb"``.
DISPLAY_SIZE = (1280, 800)
#: Longest wait for Chromium to start.
LAUNCH_TIMEOUT_S = 30.0
#: Time a measurement may take beyond its load and its stepping's own timeouts before
#: Chromium counts as stuck.
STUCK_SLACK_S = 40.0
#: A tab left idle this long is closed, and its renderer's memory given back.
TAB_IDLE_S = 30.0
#: Longest wait for the browser, Playwright and the display to shut down.
SHUTDOWN_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class _Chromium:
    """A launched browser, its root process (None if it could not be found) and its tabs
    waiting for their next artifact."""

    browser: PlaywrightBrowser
    root: psutil.Process | None
    idle: list[Tab] = field(default_factory=list)

    def alive(self) -> bool:
        if not self.browser.is_connected():
            return False
        if self.root is None:
            return True
        try:
            return bool(self.root.status() != psutil.STATUS_ZOMBIE)
        except psutil.Error:
            return False


class Browser:
    """A shared Chromium that measures artifacts, usable from many threads at once.

    Args:
        executable_path: The Chromium binary; None picks :func:`default_executable`.
        display: ``"headless"``, or ``"xvfb"`` to render headed on a virtual X display.
        max_pages: Pages measured at the same time; defaults to one per CPU. A page is
            stepped in controlled time (:mod:`verifier.chromium.clock`), so it uses the CPU
            its frames need and no more, and its verdict does not depend on how many pages
            share the cores (``ops/bench/verify_throughput``).
        sandbox: Whether Chromium sandboxes its renderers; None (the default) sandboxes
            wherever :func:`~verifier.chromium.binary.sandbox_support` says it can run and warns
            where it cannot.
            Every artifact is untrusted model output: only a machine that cannot sandbox
            should render without it.
    """

    def __init__(
        self,
        *,
        executable_path: str | os.PathLike[str] | None = None,
        display: DisplayMode = "headless",
        max_pages: int | None = None,
        sandbox: bool | None = None,
    ) -> None:
        if display not in ("headless", "xvfb"):
            raise ValueError(f"display must be 'headless' or 'xvfb', not {display!r}")
        self.sandboxed = resolve_sandbox(sandbox)
        """Whether Chromium runs with its sandbox (renderers in their own namespaces,
        under seccomp-bpf)."""
        self.executable_path = (
            os.fspath(executable_path) if executable_path else default_executable(display)
        )
        self.display = display
        self.max_pages = max_pages or os.cpu_count() or 1
        # An unknown switch Chromium ignores, to find this browser's root process.
        self._marker = f"--swarm-browser={uuid.uuid4().hex}"
        self._lock = threading.Lock()
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        # Used only on the loop thread.
        self._pages = asyncio.Semaphore(self.max_pages)
        self._launching = asyncio.Lock()
        self._playwright: Playwright | None = None
        self._xvfb: Display | None = None
        self._chromium: _Chromium | None = None
        self._measuring: set[asyncio.Task[object]] = set()
        # Idle tabs being closed: held here until done, as asyncio keeps only weak references.
        self._closing: set[asyncio.Future[None]] = set()

    def __enter__(self) -> Browser:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def measure(
        self, html: str, *, warmup_s: float = WARMUP_S, measure_s: float = JUDGED_S
    ) -> BrowserReport:
        """Measure one artifact in an offline tab, as a new document; blocks until done.

        Args:
            html: The artifact, a complete HTML document.
            warmup_s: Seconds of page time stepped before the judged time.
            measure_s: Seconds of page time judged; its last part is the late window.

        Returns:
            What the page did; artifact failures (including a crashed tab) are in the report.

        Raises:
            BrowserUnavailable: Chromium failed to launch, crashed, or this Browser is closed.
        """
        loop = self._ensure_loop()
        if threading.current_thread() is self._thread:
            raise RuntimeError("Browser.measure() cannot be called from the browser's own thread")
        future = asyncio.run_coroutine_threadsafe(self._measure(html, warmup_s, measure_s), loop)
        try:
            return future.result()
        except concurrent.futures.CancelledError as exc:
            raise BrowserUnavailable("the browser was closed during the measurement") from exc

    def browser_pids(self) -> list[int]:
        """Chromium's root process and all its descendants, for memory sampling.

        Returns:
            Process ids, root first; empty if Chromium is not running.
        """
        chromium = self._chromium
        if chromium is None or chromium.root is None:
            return []
        try:
            children = chromium.root.children(recursive=True)
        except psutil.Error:
            return []
        return [chromium.root.pid, *(child.pid for child in children)]

    def close(self) -> None:
        """Shut Chromium, Playwright and the display down; pending measurements fail."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(SHUTDOWN_TIMEOUT_S)
        except Exception:
            logger.exception("browser shutdown failed")
        loop.call_soon_threadsafe(loop.stop)
        thread.join(SHUTDOWN_TIMEOUT_S)

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._closed:
                raise BrowserUnavailable("the browser was closed")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=_run_forever, args=(loop,), name="swarm-browser", daemon=True
                )
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    async def _measure(self, html: str, warmup_s: float, measure_s: float) -> BrowserReport:
        task = asyncio.current_task()
        if task is not None:
            self._measuring.add(task)
            task.add_done_callback(self._measuring.discard)
        async with self._pages:
            chromium = await self._ensure_chromium()
            try:
                report = await asyncio.wait_for(
                    self._measure_in_tab(chromium, html, warmup_s, measure_s),
                    # A reused tab that cannot load gives way to a fresh one: two loads.
                    timeout=2 * LOAD_TIMEOUT_S
                    + step_budget_s(warmup_s=warmup_s, judged_s=measure_s)
                    + STUCK_SLACK_S,
                )
            except TimeoutError as exc:
                raise BrowserUnavailable("Chromium stopped answering during a measurement") from exc
            except PlaywrightError as exc:
                raise BrowserUnavailable(f"Chromium failed during a measurement: {exc}") from exc
            except Exception as exc:
                if chromium.alive():
                    raise
                raise BrowserUnavailable(f"Chromium died during a measurement: {exc}") from exc
        logger.debug(
            "measured artifact in %.2fs: fps=%.1f errors=%d blocked=%d",
            report.elapsed_s,
            report.fps,
            len(report.errors),
            len(report.blocked_requests),
        )
        return replace(report, sandboxed=self.sandboxed)

    async def _measure_in_tab(
        self, chromium: _Chromium, html: str, warmup_s: float, measure_s: float
    ) -> BrowserReport:
        """Measure in an idle tab of ``chromium``, or a fresh one; keep the tab if it may
        judge again (:attr:`Tab.reusable`), close it otherwise."""
        tab = chromium.idle.pop() if chromium.idle else await Tab.open(chromium.browser)
        try:
            try:
                report = await measure_page(
                    tab, html, warmup_s=warmup_s, measure_s=measure_s, is_alive=chromium.alive
                )
            except StaleTab as exc:
                logger.info("%s; measuring it in a fresh tab", exc)
                await tab.close()
                tab = await Tab.open(chromium.browser)
                report = await measure_page(
                    tab, html, warmup_s=warmup_s, measure_s=measure_s, is_alive=chromium.alive
                )
        except BaseException:
            await asyncio.shield(tab.close())
            raise
        if tab.reusable and chromium.alive():
            chromium.idle.append(tab)
            asyncio.get_running_loop().call_later(
                TAB_IDLE_S, self._close_if_idle, chromium, tab, tab.judged
            )
        else:
            await tab.close()
        return report

    def _close_if_idle(self, chromium: _Chromium, tab: Tab, judged: int) -> None:
        """Close ``tab`` if it is still idle, and has judged nothing since ``judged``."""
        if tab in chromium.idle and tab.judged == judged:
            chromium.idle.remove(tab)
            closing = asyncio.ensure_future(tab.close())
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)

    async def _ensure_chromium(self) -> _Chromium:
        async with self._launching:
            if self._chromium is not None:
                if self._chromium.alive():
                    return self._chromium
                logger.warning("Chromium is gone; relaunching")
                with contextlib.suppress(PlaywrightError):
                    await self._chromium.browser.close()
                self._chromium = None
            try:
                self._chromium = await self._launch()
            except Exception as exc:
                await self._stop_playwright()
                raise BrowserUnavailable(
                    f"could not launch Chromium at {self.executable_path}: {exc}"
                ) from exc
            return self._chromium

    async def _launch(self) -> _Chromium:
        started = time.monotonic()
        if self._playwright is None:
            starting = async_playwright()
            self._playwright = await starting.start()
            _watch_driver(starting)
        env: dict[str, str | float | bool] | None = None
        if self.display == "xvfb":
            if self._xvfb is None:
                xvfb = Display(backend="xvfb", size=DISPLAY_SIZE, manage_global_env=False)
                await asyncio.to_thread(xvfb.start)
                self._xvfb = xvfb
            # Playwright replaces the browser's whole environment when given one.
            env = {**os.environ, "DISPLAY": self._xvfb.new_display_var}
        browser = await self._playwright.chromium.launch(
            executable_path=self.executable_path,
            headless=self.display == "headless",
            **launch_options(self.sandboxed, self._marker),
            env=env,
            timeout=LAUNCH_TIMEOUT_S * 1000,
            handle_sigint=False,
            handle_sigterm=False,
            handle_sighup=False,
        )
        root = find_root(self._marker)
        if root is None:
            logger.warning("could not find Chromium's root process; memory sampling is off")
        logger.info(
            "launched Chromium %s (pid %s, %s, sandbox %s) in %.2fs",
            browser.version,
            root.pid if root else "unknown",
            self.display,
            "on" if self.sandboxed else "off",
            time.monotonic() - started,
        )
        return _Chromium(browser, root)

    async def _shutdown(self) -> None:
        # Only our own tasks: Playwright's connection runs on this loop too and must stay up
        # until the browser is closed.
        pending = list(self._measuring)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if self._chromium is not None:
            with contextlib.suppress(PlaywrightError):
                await self._chromium.browser.close()
            self._chromium = None
        await self._stop_playwright()
        if self._xvfb is not None:
            await asyncio.to_thread(self._xvfb.stop)
            self._xvfb = None

    async def _stop_playwright(self) -> None:
        if self._playwright is not None:
            with contextlib.suppress(Exception):
                await self._playwright.stop()
            self._playwright = None


def _watch_driver(starting: object) -> None:
    """Read the error Playwright records when its driver goes away, so asyncio never logs it.

    Playwright sets that error on a future of its transport which, once the driver has
    started, nothing awaits. A stopped service's SIGTERM reaches its whole process group, so
    the driver and Chromium die under the worker's measurements, and unread, the error is
    logged by asyncio at ERROR ("Future exception was never retrieved") when the future is
    collected. The measurements in flight fail as :class:`BrowserUnavailable` either way.

    Args:
        starting: What ``async_playwright()`` returned, once started. The future is
            Playwright's own: where it is not found, nothing is watched.
    """
    transport = getattr(getattr(starting, "_client", None), "_transport", None)
    ended = getattr(transport, "on_error_future", None)
    if isinstance(ended, asyncio.Future):
        ended.add_done_callback(_after_driver_lost)


def _after_driver_lost(ended: asyncio.Future[object]) -> None:
    if not ended.cancelled() and (exc := ended.exception()) is not None:
        logger.warning("Playwright's driver went away (%s): the measurements in flight fail", exc)


def _run_forever(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        loop.close()


def find_root(marker: str) -> psutil.Process | None:
    """The browser process among this process's descendants that carry ``marker``.

    Debian's launchers are shell scripts: /usr/bin/chromium execs the browser, but
    /usr/bin/chromium-headless-shell runs it as a child, so the script carries the marker
    too. The browser's helpers are started with ``--type=``, but a helper that is forked
    and has not yet exec'd still shows the browser's own command line; it is told apart
    by running the same binary as its parent. The browser is the innermost of what is left.

    Args:
        marker: The command-line switch the browser was launched with.

    Returns:
        The browser's root process, or None if none is found.
    """
    found: dict[int, tuple[psutil.Process, int, str]] = {}
    for process in psutil.Process().children(recursive=True):
        try:
            cmdline = process.cmdline()
            if marker in cmdline and not any(arg.startswith("--type=") for arg in cmdline):
                found[process.pid] = (process, process.ppid(), process.exe())
        except psutil.Error:
            continue
    launched = {
        pid: ppid
        for pid, (_, ppid, exe) in found.items()
        if ppid not in found or found[ppid][2] != exe
    }
    parents = set(launched.values())
    innermost = [found[pid][0] for pid in launched if pid not in parents]
    return innermost[0] if len(innermost) == 1 else None
