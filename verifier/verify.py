"""Judge a handed-off workspace and record the verdict: the verify queues' work.

The session's run names its task; the task's verifier kind says how its handoffs are judged:
``chromium`` renders the page in the process's Chromium, ``python`` runs the instance's hidden
test in the sandbox, ``static`` asks the task's own checks. Each kind has its queue, so a host
runs browsers or sandboxes where they fit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from verifier.chromium.binary import default_executable
from verifier.chromium.judge import judge
from verifier.verdict import Verdict
from worker.agent.verdict import VerdictIn
from worker.errors import BrowserUnavailable, ConfigError, SandboxUnavailable, VerifierUnavailable
from worker.fleet.runtime import Runtime
from worker.profiles import get_profile
from worker.runs.verdicts import Handoff, claim_handoff, record_verdict, release_handoff
from worker.settings import Settings
from worker.tasks.base import Instance, Submission, Task, VerifierKind, passed
from worker.tasks.fingerprint import recorded_task

if TYPE_CHECKING:
    from verifier.chromium.browser import Browser
    from verifier.sandbox.bubblewrap import Sandbox

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_browser: Browser | None = None
_sandbox: Sandbox | None = None
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


def shared_sandbox(settings: Settings) -> Sandbox:
    """This process's Python sandbox (a recipe: each judgement builds its own)."""
    global _sandbox
    from verifier.sandbox.bubblewrap import Sandbox

    with _lock:
        if _sandbox is None:
            _sandbox = Sandbox.from_settings(settings)
        return _sandbox


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
    browser: Browser | Callable[[], Browser | None] | None,
) -> str:
    """Judge what a session handed off in ``round_no`` and record the verdict.

    Args:
        rt: The runtime verifications run on.
        session_id: The session.
        round_no: Its repair round.
        browser: For a page: the browser to judge it in (None: statically), or what gives it
            (called only when a page is judged, so a sandbox worker never starts one).

    Returns:
        What the verdict did: ``succeeded``, ``repair``, ``failed`` or ``duplicate``.

    Raises:
        BrowserUnavailable: Chromium failed; nothing was recorded, the caller retries.
        SandboxUnavailable: the sandbox failed; nothing was recorded, the caller retries.
        VerifierUnavailable: this worker cannot load the task; the caller retries.
    """
    handoff = claim_handoff(rt, session_id=session_id, round_no=round_no)
    if handoff is None:
        return "duplicate"
    verify = partial(_verify, rt, handoff, browser=browser)
    if rt.tracer is not None:
        return rt.tracer.verification(session_id=session_id, round_no=round_no, judge=verify)
    return verify()


def _verify(
    rt: Runtime,
    handoff: Handoff,
    *,
    browser: Browser | Callable[[], Browser | None] | None,
) -> str:
    """Judge a claimed handoff and record the verdict (see :func:`verify_handoff`)."""
    session_id = handoff.session_id
    assert handoff.epoch is not None
    started = time.monotonic()
    # The lease lives as long as this worker does: renewed through a slow judgement, up
    # to the verdict's commit, which gives it back.
    with rt.leases.hold(session_id, handoff.epoch):
        try:
            task = _task_of(handoff)
            verdict, method = judge_submission(
                task,
                submission_of(task, handoff),
                settings=rt.settings,
                browser=browser,
            )
        except (BrowserUnavailable, SandboxUnavailable, VerifierUnavailable):
            release_handoff(rt, handoff, retry_in_s=0)
            raise
        video = None
        if method == "browser":
            # Recorded in a headed browser of its own: the judging browser may be headless.
            # Imported here, as Browser above: the recorder needs Playwright too.
            from verifier.chromium.record import video_of

            video = video_of(handoff.content, settings=rt.settings, run_asks=handoff.record)
        return record_verdict(
            rt,
            handoff,
            VerdictIn(
                passed=verdict.passed,
                method=method,
                checks=[asdict(c) for c in verdict.checks],
                fps=verdict.fps,
                screenshot_png=verdict.screenshot_png,
                elapsed_ms=int((time.monotonic() - started) * 1000),
                video_mp4=video,
            ),
        )


def judge_submission(
    task: Task,
    submission: Submission,
    *,
    settings: Settings,
    browser: Browser | Callable[[], Browser | None] | None,
) -> tuple[Verdict, str]:
    """Judge a submission as the task's verifier kind says; returns the verdict and method.

    Raises:
        BrowserUnavailable: Chromium failed.
        SandboxUnavailable: the sandbox failed.
    """
    if task.verifier is VerifierKind.python:
        return judge_python_handoff(task, submission, settings), "sandbox"
    if task.verifier is VerifierKind.static:
        return judge_static(task, submission), "static"
    chosen = browser() if callable(browser) else browser
    verdict = judge(
        submission.content,
        browser=chosen,
        min_fps=settings.verify_min_fps,
        static=task.static_checks(_public(submission)),
    )
    return verdict, "browser" if chosen is not None else "static"


def submission_of(task: Task, handoff: Handoff) -> Submission:
    """What a handoff gives the verifier: its files, and its instance with hidden fields."""
    try:
        instance = task.instance(handoff.instance_id)
    except ConfigError:  # a session made before tasks: its brief is all there is
        instance = Instance(handoff.instance_id, handoff.brief)
    spec = task.artifact_for(handoff.main)
    limit = get_profile(handoff.profile).max_bytes(spec.max_bytes) if spec else len(handoff.content)
    return Submission(instance=instance, files=handoff.files, main=handoff.main, max_bytes=limit)


def judge_python_handoff(task: Task, submission: Submission, settings: Settings) -> Verdict:
    """The task's static checks, then the instance's hidden test in the sandbox."""
    from verifier.sandbox.judge import judge_python

    static = task.static_checks(_public(submission))
    if not passed(static):
        return Verdict(passed=False, checks=static, fps=None)
    verdict = judge_python(
        submission, task.hidden_test(submission.instance), sandbox=shared_sandbox(settings)
    )
    checks = [*static, *verdict.checks]
    return Verdict(passed=passed(checks), checks=checks, fps=None, sandbox=True)


def judge_static(task: Task, submission: Submission) -> Verdict:
    """The task's static checks, then its own judgement (it reads the files as data)."""
    checks = task.static_checks(_public(submission))
    if passed(checks):
        checks = [*checks, *task.judge(submission)]
    return Verdict(passed=passed(checks), checks=checks, fps=None)


def _public(submission: Submission) -> Submission:
    return Submission(
        instance=submission.instance.without_hidden(),
        files=submission.files,
        main=submission.main,
        max_bytes=submission.max_bytes,
    )


def _task_of(handoff: Handoff) -> Task:
    try:
        return recorded_task(
            handoff.task_ref, version=handoff.task_version, sha256=handoff.task_sha256
        )
    except ConfigError as exc:
        # Another worker of the fleet may have the task: try again there, or later.
        raise VerifierUnavailable(str(exc), delay_s=10.0) from exc
