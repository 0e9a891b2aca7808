"""``python -m verifier check PAGE.html``: judge one artifact from the command line;
``python -m verifier record PAGE.html --out page.mp4``: record it as a video.

Prints a table of checks (or one JSON object with ``--json``) on stdout and nothing else,
saying which kinds of checks ran and why any were skipped; the exit code says whether the
page passed, failed, or could not be judged.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NoReturn

import click
from pydantic import ValidationError

from verifier.chromium.browser import Browser, BrowserUnavailable, DisplayMode
from verifier.chromium.judge import DEFAULT_MIN_FPS, Verdict, judge
from verifier.chromium.record import DEFAULT_RECORD_S, FRAME_RATE, RecorderUnavailable, record_page
from verifier.verify import browser_wanted, judge_python_handoff, judge_static
from worker.errors import ConfigError, SandboxUnavailable
from worker.settings import Settings
from worker.tasks.base import Submission, Task, VerifierKind
from worker.tasks.registry import DEFAULT_TASK, load_task

__all__ = ["EXIT_FAILED", "EXIT_PASSED", "EXIT_UNJUDGED", "cli"]

#: Every check passed.
EXIT_PASSED = 0
#: At least one check failed.
EXIT_FAILED = 1
#: The page could not be judged: unreadable file, bad settings or no browser.
EXIT_UNJUDGED = 2
#: Widest value shown in the table before it is cut.
_VALUE_WIDTH = 28


@click.group()
def cli() -> None:
    """Swarm's artifact verifier."""


@cli.command()
@click.argument("page", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("others", nargs=-1, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--task",
    "task_ref",
    default=DEFAULT_TASK,
    show_default=True,
    help="The task the file is a handoff of: a name or package.module:factory.",
)
@click.option("--instance", "instance_id", default=None, help="The task's instance, by id.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
@click.option(
    "--display",
    type=click.Choice(["headless", "xvfb"]),
    default=None,
    help="Render headless (default) or headed under Xvfb.  [env: SWARM_DISPLAY]",
)
@click.option(
    "--chromium",
    "chromium_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Chromium binary (default /usr/bin/chromium-headless-shell when headless and "
    "installed, else /usr/bin/chromium).  [env: SWARM_CHROMIUM_PATH]",
)
@click.option(
    "--screenshot",
    "screenshot_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the final screenshot to this PNG file.",
)
@click.option(
    "--min-fps",
    type=click.FloatRange(min=0),
    default=DEFAULT_MIN_FPS,
    show_default=True,
    help="Frames per second the page's own loop must reach.",
)
@click.option(
    "--static",
    "static_only",
    is_flag=True,
    help="Static checks only, no browser.  [env: SWARM_VERIFIER=static]",
)
@click.pass_context
def check(
    ctx: click.Context,
    page: Path,
    others: tuple[Path, ...],
    task_ref: str,
    instance_id: str | None,
    as_json: bool,
    display: DisplayMode | None,
    chromium_path: Path | None,
    screenshot_path: Path | None,
    min_fps: float,
    static_only: bool,
) -> None:
    """Judge PAGE (and OTHERS, the rest of a workspace) as the task's verifier would.

    A page of the dashboard task: static checks, then a measurement in Chromium.
    SWARM_VERIFIER=static (or --static) skips the browser; auto, the default, skips it when
    Chromium is not installed. The output says which checks ran and why any were skipped.
    A file of another task (``--task humaneval --instance HumanEval/3 solution.py``) is
    judged by that task's verifier: its hidden test in the Python sandbox, or its own checks.
    Exits 0 if every check passed, 1 if one failed, 2 if it could not be judged.
    """
    try:
        settings = Settings()
    except ValidationError as exc:
        _fail(ctx, f"invalid SWARM_* settings: {exc.errors()[0]['msg']}")
    try:
        task = load_task(task_ref)
    except ConfigError as exc:
        _fail(ctx, str(exc))
    if task.verifier is not VerifierKind.chromium:
        _check_task(ctx, settings, task, instance_id, [page, *others], as_json=as_json)
        return
    try:
        html = page.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        _fail(ctx, f"cannot read {page}: {reason}")
    overrides: dict[str, object] = {"display": display or settings.display}
    if chromium_path is not None:  # a binary named on the command line is meant to be used
        overrides |= {"chromium_path": chromium_path, "verifier": "browser"}
    if static_only:
        overrides["verifier"] = "static"
    settings = settings.model_copy(update=overrides)
    try:
        use_browser, chromium = browser_wanted(settings)
    except ConfigError as exc:
        _fail(ctx, f"browser unavailable: {exc}")
    skipped = None if use_browser else _static_reason(settings, static_only, chromium)
    try:
        if use_browser:
            with Browser(executable_path=chromium, display=settings.display, max_pages=1) as b:
                verdict = judge(html, browser=b, min_fps=min_fps)
        else:
            verdict = judge(html, browser=None, min_fps=min_fps)
    except BrowserUnavailable as exc:
        _fail(ctx, f"browser unavailable: {exc}".splitlines()[0])
    if use_browser and verdict.fps is None:
        skipped = "a static check failed"
    if screenshot_path is not None:
        _write_screenshot(ctx, verdict, screenshot_path)
    if as_json:
        click.echo(json.dumps({**verdict.to_dict(), **_coverage(skipped)}))
    else:
        click.echo(_table(verdict, skipped))
    ctx.exit(EXIT_PASSED if verdict.passed else EXIT_FAILED)


def _check_task(
    ctx: click.Context,
    settings: Settings,
    task: Task,
    instance_id: str | None,
    paths: list[Path],
    *,
    as_json: bool,
) -> None:
    """Judge files of a task that is not a page, as a fleet would record it."""
    if instance_id is None:
        _fail(ctx, f"--instance is required for task {task.name} (e.g. {task.instances()[0].id})")
    try:
        instance = task.instance(instance_id)
    except ConfigError as exc:
        _fail(ctx, str(exc))
    # The first file is the handed-off artifact, under the name the task gives it.
    main = task.main_artifact(instance.without_hidden())
    files = {main: _read_page(ctx, paths[0])} | {p.name: _read_page(ctx, p) for p in paths[1:]}
    submission = Submission(instance=instance, files=files, main=main, max_bytes=len(files[main]))
    try:
        if task.verifier is VerifierKind.python:
            verdict = judge_python_handoff(task, submission, settings)
            ran = ["static", "sandbox"]
        else:
            verdict = judge_static(task, submission)
            ran = ["static"]
    except SandboxUnavailable as exc:
        _fail(ctx, f"sandbox unavailable: {exc}".splitlines()[0])
    if as_json:
        click.echo(
            json.dumps(
                {
                    **verdict.to_dict(),
                    "task": task.name,
                    "instance": instance.id,
                    "ran": ran,
                    "skipped": {},
                }
            )
        )
    else:
        click.echo(_table(verdict, None, ran=" and ".join(ran)))
    ctx.exit(EXIT_PASSED if verdict.passed else EXIT_FAILED)


def _static_reason(settings: Settings, static_only: bool, chromium: Path) -> str:
    """Why the browser checks are not run, in words."""
    if static_only:
        return "--static"
    if settings.verifier == "static":
        return "SWARM_VERIFIER=static"
    return f"Chromium not found at {chromium}"


def _coverage(skipped: str | None) -> dict[str, object]:
    """Which kinds of checks ran, and why the browser checks were skipped (None: they ran)."""
    ran = ["static"] if skipped else ["static", "browser"]
    return {"ran": ran, "skipped": {"browser": skipped} if skipped else {}}


def _fail(ctx: click.Context, message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    ctx.exit(EXIT_UNJUDGED)


def _write_screenshot(ctx: click.Context, verdict: Verdict, path: Path) -> None:
    if verdict.screenshot_png is None:
        click.echo("note: no screenshot, the page never reached the browser", err=True)
        return
    try:
        path.write_bytes(verdict.screenshot_png)
    except OSError as exc:
        _fail(ctx, f"cannot write {path}: {exc.strerror or exc}")


def _table(verdict: Verdict, skipped: str | None, *, ran: str = "static and browser") -> str:
    width = max(len(check.name) for check in verdict.checks)
    lines = [
        f"{'ok' if check.passed else 'FAIL':4}  {check.name:{width}}  "
        f"{_shown(check.value):{_VALUE_WIDTH}}  {check.detail}"
        for check in verdict.checks
    ]
    lines.append(
        f"ran: static checks; skipped: browser checks ({skipped})"
        if skipped
        else f"ran: {ran} checks"
    )
    failed = verdict.failed
    summary = "PASSED" if verdict.passed else f"FAILED ({len(failed)} of {len(verdict.checks)})"
    fps = "" if verdict.fps is None else f", {verdict.fps:g} fps"
    lines.append(f"{summary}{fps}")
    return "\n".join(lines)


def _shown(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= _VALUE_WIDTH else text[: _VALUE_WIDTH - 3] + "..."


#: A file to write, named on the command line.
_FILE = click.Path(dir_okay=False, path_type=Path)


@cli.command()
@click.argument("page", type=_FILE)
@click.option(
    "--seconds",
    type=click.FloatRange(min=0.1, max=3600),
    default=DEFAULT_RECORD_S,
    show_default=True,
    help="Length of the video.",
)
@click.option(
    "--out", type=_FILE, required=True, help="The H.264 MP4 to write (1920x1080, 60 fps)."
)
@click.option("--master", type=_FILE, help="Also write a lossless FFV1 MKV master here.")
@click.pass_context
def record(
    ctx: click.Context,
    page: Path,
    seconds: float,
    out: Path,
    master: Path | None,
) -> None:
    """Record PAGE running full screen in Chromium under Xvfb, as a video made by ffmpeg.

    Chromium is /usr/bin/chromium unless SWARM_CHROMIUM_PATH names another (the headless
    shell cannot render to a display). Exits 0 once the video is written, 2 if it could
    not be made.
    """
    try:
        settings = Settings()
    except ValidationError as exc:
        _fail(ctx, f"invalid SWARM_* settings: {exc.errors()[0]['msg']}")
    html = _read_page(ctx, page)
    for path in (out, master):
        if path is not None and not path.parent.is_dir():
            _fail(ctx, f"cannot write {path}: no directory {path.parent}")
    chromium = settings.chromium_path
    if chromium is not None and not chromium.exists():
        _fail(ctx, f"Chromium not found at {chromium}")
    try:
        made = record_page(html, seconds=seconds, out=out, master=master, executable_path=chromium)
    except RecorderUnavailable as exc:
        _fail(ctx, f"could not record {page}: {exc}".splitlines()[0])
    grabbed = "" if made.frames_grabbed is None else f", {made.frames_grabbed} frames grabbed"
    click.echo(
        f"wrote {out}" + (f" and {master}" if master else "") + f" ({seconds:g} s at "
        f"{FRAME_RATE} fps{grabbed})"
    )


def _read_page(ctx: click.Context, page: Path) -> str:
    try:
        return page.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        _fail(ctx, f"cannot read {page}: {reason}")
