"""Judge a handed-off artifact version and record the verdict: the verify queue's work."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from verifier.chromium.binary import default_executable
from verifier.chromium.judge import judge
from worker.errors import BrowserUnavailable, ConfigError
from worker.fleet.runtime import Runtime
from worker.runs.verdicts import VerdictIn, claim_handoff, record_verdict, release_handoff
from worker.settings import Settings

if TYPE_CHECKING:
    from verifier.chromium.browser import Browser

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_browser: Browser | None = None
_warned_static = False


def browser_wanted(settings: Settings) -> tuple[bool, Path]:
    """Whether artifacts are judged in Chromium, and which binary that would be.

    ``SWARM_VERIFIER=browser`` always, ``auto`` when the binary is installed, ``static`` never.

    Raises:
        ConfigError: ``verifier=browser`` but Chromium is not installed.
    """
    chromium = settings.chromium_path or Path(default_executable(settings.display))
    if settings.verifier == "browser" and not chromium.exists():
        raise ConfigError(f"Chromium not found at {chromium}")
    return settings.verifier == "browser" or (
        settings.verifier == "auto" and chromium.exists()
    ), chromium


def shared_browser(settings: Settings) -> Browser | None:
    """This process's browser, launched on first use; None when judging statically.

    Raises:
        ConfigError: ``verifier=browser`` but Chromium is not installed.
    """
    global _browser, _warned_static
    use_browser, chromium = browser_wanted(settings)
    with _lock:
        if not use_browser:
            # Static checks were asked for, or chosen because Chromium is missing: only the
            # second is worth a warning.
            if settings.verifier == "auto" and not _warned_static:
                logger.warning(
                    "Chromium not found at %s: artifacts are judged by static checks only", chromium
                )
                _warned_static = True
            return None
        if _browser is None:
            # Playwright and pyvirtualdisplay load with the first browser: a worker that
            # judges statically, or only runs sessions, never imports them.
            from verifier.chromium.browser import Browser

            _browser = Browser(
                executable_path=chromium,
                display=settings.display,
                max_pages=settings.verify_max_pages,
            )
        return _browser


def close_browser() -> None:
    """Shut this process's browser down, if it was launched."""
    global _browser
    with _lock:
        if _browser is not None:
            _browser.close()
            _browser = None


def verify_handoff(
    rt: Runtime,
    *,
    session_id: int,
    round_no: int,
    browser: Browser | None,
    retry_starved: bool = True,
) -> str:
    """Judge what a session handed off in ``round_no`` and record the verdict.

    Returns:
        What the verdict did: ``succeeded``, ``repair``, ``failed`` or ``duplicate``.

    Raises:
        BrowserUnavailable: Chromium failed; nothing was recorded, the caller retries.
    """
    handoff = claim_handoff(rt, session_id=session_id, round_no=round_no)
    if handoff is None:
        return "duplicate"
    assert handoff.epoch is not None
    started = time.monotonic()
    # The lease lives as long as this worker does: renewed through a slow render.
    with rt.leases.hold(session_id, handoff.epoch):
        try:
            verdict = judge(
                handoff.content,
                browser=browser,
                max_bytes=handoff.max_bytes,
                min_fps=rt.settings.verify_min_fps,
                retry_starved=retry_starved,
            )
        except BrowserUnavailable:
            release_handoff(rt, handoff, retry_in_s=0)
            raise
        video = None
        if browser is not None:
            # Recorded in a headed browser of its own: the judging browser may be headless.
            # Imported here, as Browser above: the recorder needs Playwright too.
            from verifier.chromium.record import video_of

            video = video_of(handoff.content, settings=rt.settings, run_asks=handoff.record)
    return record_verdict(
        rt,
        handoff,
        VerdictIn(
            passed=verdict.passed,
            method="browser" if browser is not None else "static",
            checks=[asdict(c) for c in verdict.checks],
            fps=verdict.fps,
            screenshot_png=verdict.screenshot_png,
            elapsed_ms=int((time.monotonic() - started) * 1000),
            video_mp4=video,
        ),
    )
