"""``python -m verifier check PAGE.html``: judge one artifact from the command line;
``python -m verifier record PAGE.html --out page.mp4``: record it as a video.

Prints a table of checks (or one JSON object with ``--json``) on stdout and nothing else;
the exit code says whether the page passed, failed, or could not be judged.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NoReturn

import click
from pydantic import ValidationError

from verifier.browser import Browser, BrowserUnavailable, DisplayMode
from verifier.judge import DEFAULT_MIN_FPS, Verdict, judge
from verifier.record import DEFAULT_RECORD_S, FRAME_RATE, RecorderUnavailable, record_page
from worker.settings import Settings

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
@click.pass_context
def check(
    ctx: click.Context,
    page: Path,
    as_json: bool,
    display: DisplayMode | None,
    chromium_path: Path | None,
    screenshot_path: Path | None,
    min_fps: float,
) -> None:
    """Judge PAGE: static checks, then a measurement in Chromium.

    Exits 0 if every check passed, 1 if one failed, 2 if the page could not be judged.
    """
    try:
        settings = Settings()
    except ValidationError as exc:
        _fail(ctx, f"invalid SWARM_* settings: {exc.errors()[0]['msg']}")
    try:
        html = page.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        _fail(ctx, f"cannot read {page}: {reason}")
    browser = Browser(
        executable_path=chromium_path or settings.chromium_path,
        display=display or settings.display,
        max_pages=1,
    )
    try:
        with browser:
            verdict = judge(html, browser=browser, min_fps=min_fps)
    except BrowserUnavailable as exc:
        _fail(ctx, f"browser unavailable: {exc}".splitlines()[0])
    if screenshot_path is not None:
        _write_screenshot(ctx, verdict, screenshot_path)
    click.echo(verdict.to_json() if as_json else _table(verdict))
    ctx.exit(EXIT_PASSED if verdict.passed else EXIT_FAILED)


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


def _table(verdict: Verdict) -> str:
    width = max(len(check.name) for check in verdict.checks)
    lines = [
        f"{'ok' if check.passed else 'FAIL':4}  {check.name:{width}}  "
        f"{_shown(check.value):{_VALUE_WIDTH}}  {check.detail}"
        for check in verdict.checks
    ]
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
