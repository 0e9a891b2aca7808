"""Video of an artifact: headed Chromium on a virtual display, captured by ffmpeg.

The page runs full screen in Debian's Chromium on an Xvfb screen of 1920x1080x24 (through
pyvirtualdisplay), cut off from the network as when it is judged. ffmpeg grabs the screen
with x11grab at 60 fps into a lossless capture (``libx264rgb -qp 0 -preset ultrafast``: the
cheapest lossless encoder, so that the grab keeps up), then encodes it once more, off the
clock, into an H.264 MP4 (``-crf 18 -pix_fmt yuv420p``, constant 60 fps, exactly the asked
length) and, if asked, a lossless FFV1 MKV master.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Route, async_playwright
from pyvirtualdisplay.display import Display

from verifier.chromium.binary import DEFAULT_CHROMIUM_PATH, launch_options, resolve_sandbox
from verifier.chromium.page import ARTIFACT_URL
from worker.errors import BrowserUnavailable
from worker.settings import Settings

__all__ = [
    "DEFAULT_RECORD_S",
    "FRAME_RATE",
    "SCREEN_SIZE",
    "RecorderUnavailable",
    "Recording",
    "record_bytes",
    "record_page",
    "video_of",
]

logger = logging.getLogger(__name__)

#: Seconds of video a recording holds unless told otherwise.
DEFAULT_RECORD_S = 5.0
#: Width and height of the virtual screen, and of the video.
SCREEN_SIZE = (1920, 1080)
#: Bits per pixel of the virtual screen.
COLOR_DEPTH = 24
#: Frames per second grabbed and written.
FRAME_RATE = 60
#: Seconds the page runs after loading before the grab starts (first paint, web fonts).
SETTLE_S = 0.5
#: Longest wait for the page to load.
LOAD_TIMEOUT_S = 15.0
#: Time ffmpeg may take beyond the video's length, to grab or to encode it.
FFMPEG_SLACK_S = 120.0
#: Chromium switches of a recording: full screen, nothing drawn over the page.
RECORD_ARGS = (
    "--kiosk",
    "--window-position=0,0",
    f"--window-size={SCREEN_SIZE[0]},{SCREEN_SIZE[1]}",
    "--hide-scrollbars",
    "--noerrdialogs",
)
#: One recording at a time per process: each one keeps a core or two busy.
_recording = threading.Lock()


class RecorderUnavailable(BrowserUnavailable):
    """ffmpeg, the virtual display or Chromium could not make the recording."""


@dataclass(frozen=True)
class Recording:
    """Files a recording wrote."""

    mp4: Path
    master: Path | None
    seconds: float
    frames_grabbed: int | None
    """Distinct frames ffmpeg grabbed (None: unknown); fewer than ``seconds * FRAME_RATE``
    when the machine was too busy, the gaps then repeat the frame that was on screen."""


def ffmpeg_path() -> str:
    """The ffmpeg binary on PATH.

    Raises:
        RecorderUnavailable: ffmpeg is not installed.
    """
    found = shutil.which("ffmpeg")
    if found is None:
        raise RecorderUnavailable("ffmpeg is not installed (Debian's package: ffmpeg)")
    return found


def record_page(
    html: str,
    *,
    seconds: float = DEFAULT_RECORD_S,
    out: Path,
    master: Path | None = None,
    executable_path: str | os.PathLike[str] | None = None,
    sandbox: bool | None = None,
) -> Recording:
    """Record ``seconds`` of ``html`` running full screen, as an MP4 (and an MKV master).

    Args:
        html: The artifact, a complete HTML document.
        seconds: Length of the video.
        out: Where to write the H.264 MP4.
        master: Where to write the lossless FFV1 MKV, if wanted.
        executable_path: The Chromium binary; by default Debian's full browser (the
            headless shell cannot render to a display).
        sandbox: Chromium's sandbox, as :class:`verifier.chromium.browser.Browser` takes it.

    Returns:
        The files written.

    Raises:
        RecorderUnavailable: ffmpeg, Xvfb or Chromium failed; nothing is blamed on the page.
    """
    ffmpeg = ffmpeg_path()
    chromium = os.fspath(executable_path or DEFAULT_CHROMIUM_PATH)
    sandboxed = resolve_sandbox(sandbox)
    with _recording, tempfile.TemporaryDirectory(prefix="swarm-record-") as tmp:
        capture = Path(tmp) / "capture.mkv"
        display = Display(
            backend="xvfb", size=SCREEN_SIZE, color_depth=COLOR_DEPTH, manage_global_env=False
        )
        try:
            display.start()
        except Exception as exc:
            raise RecorderUnavailable(f"could not start Xvfb: {exc}") from exc
        try:
            asyncio.run(
                _capture(
                    html,
                    ffmpeg=ffmpeg,
                    chromium=chromium,
                    sandboxed=sandboxed,
                    display=display.new_display_var,
                    seconds=seconds,
                    capture=capture,
                )
            )
        finally:
            display.stop()
        grabbed = _frames_in(ffmpeg, capture)
        _encode(ffmpeg, capture, seconds=seconds, out=out, master=master)
    wanted = round(seconds * FRAME_RATE)
    if grabbed is not None and grabbed < wanted * 0.9:
        logger.warning(
            "the machine was busy: ffmpeg grabbed %d of %d frames; gaps repeat a frame",
            grabbed,
            wanted,
        )
    logger.info("recorded %.1fs of an artifact to %s", seconds, out)
    return Recording(out, master, seconds, grabbed)


def record_bytes(
    html: str,
    *,
    seconds: float = DEFAULT_RECORD_S,
    executable_path: str | os.PathLike[str] | None = None,
) -> bytes:
    """Like :func:`record_page`, returning the MP4's bytes."""
    with tempfile.TemporaryDirectory(prefix="swarm-video-") as tmp:
        out = Path(tmp) / "artifact.mp4"
        record_page(html, seconds=seconds, out=out, executable_path=executable_path)
        return out.read_bytes()


async def _capture(
    html: str,
    *,
    ffmpeg: str,
    chromium: str,
    sandboxed: bool,
    display: str,
    seconds: float,
    capture: Path,
) -> None:
    async def serve(route: Route) -> None:
        # The document is the artifact; everything else it asks for is refused, as when
        # it is judged.
        with contextlib.suppress(PlaywrightError):
            if route.request.url == ARTIFACT_URL and route.request.is_navigation_request():
                await route.fulfill(status=200, content_type="text/html; charset=utf-8", body=html)
            else:
                await route.abort("internetdisconnected")

    try:
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(
                executable_path=chromium,
                headless=False,
                env={**os.environ, "DISPLAY": display},
                handle_sigint=False,
                handle_sigterm=False,
                handle_sighup=False,
                **launch_options(sandboxed, *RECORD_ARGS),
            )
            try:
                context = await browser.new_context(no_viewport=True)
                await context.set_offline(True)
                await context.route("**/*", serve)
                page = await context.new_page()
                cdp = await context.new_cdp_session(page)
                window = await cdp.send("Browser.getWindowForTarget")
                await cdp.send(
                    "Browser.setWindowBounds",
                    {"windowId": window["windowId"], "bounds": {"windowState": "fullscreen"}},
                )
                with contextlib.suppress(PlaywrightError):
                    # A page that never finishes loading is recorded as it is.
                    await page.goto(ARTIFACT_URL, wait_until="load", timeout=LOAD_TIMEOUT_S * 1000)
                await asyncio.sleep(SETTLE_S)
                await _grab(ffmpeg, display=display, seconds=seconds, capture=capture)
            finally:
                with contextlib.suppress(PlaywrightError):
                    await browser.close()
    except PlaywrightError as exc:
        raise RecorderUnavailable(f"Chromium failed during a recording: {exc}") from exc


async def _grab(ffmpeg: str, *, display: str, seconds: float, capture: Path) -> None:
    width, height = SCREEN_SIZE
    command = [
        ffmpeg,
        "-nostdin",
        "-loglevel",
        "error",
        "-f",
        "x11grab",
        "-framerate",
        str(FRAME_RATE),
        "-video_size",
        f"{width}x{height}",
        "-draw_mouse",
        "0",
        "-i",
        f"{display}.0",
        "-t",
        f"{seconds:.3f}",
        "-c:v",
        "libx264rgb",
        "-preset",
        "ultrafast",
        "-qp",
        "0",
        "-y",
        os.fspath(capture),
    ]
    process = await asyncio.create_subprocess_exec(
        *command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        _, stderr = await asyncio.wait_for(process.communicate(), seconds + FFMPEG_SLACK_S)
    except TimeoutError as exc:
        process.kill()
        await process.wait()
        raise RecorderUnavailable("ffmpeg did not finish grabbing the screen") from exc
    if process.returncode != 0:
        raise RecorderUnavailable(f"ffmpeg could not grab the screen: {_last_line(stderr)}")


def _encode(ffmpeg: str, capture: Path, *, seconds: float, out: Path, master: Path | None) -> None:
    # Constant frame rate and an exact length: a busy machine grabs fewer frames than
    # asked, and the fps filter fills each gap with the frame that was on screen; tpad
    # holds the last one up to the asked length and trim cuts there. (``-t`` alone would
    # stop at the last frame grabbed before the end, short of the asked length.)
    timing = [
        "-vf",
        f"fps={FRAME_RATE},tpad=stop_mode=clone:stop_duration={seconds:.3f},"
        f"trim=duration={seconds:.3f}",
    ]
    command = [ffmpeg, "-nostdin", "-loglevel", "error", "-i", os.fspath(capture)]
    command += [*timing, "-c:v", "libx264", "-preset", "veryfast", "-crf", "18"]
    command += ["-pix_fmt", "yuv420p", "-movflags", "+faststart", "-y", os.fspath(out)]
    if master is not None:
        command += [*timing, "-c:v", "ffv1", "-level", "3", "-slices", "4", "-y"]
        command += [os.fspath(master)]
    try:
        done = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=seconds * 10 + FFMPEG_SLACK_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise RecorderUnavailable("ffmpeg did not finish encoding the video") from exc
    if done.returncode != 0:
        raise RecorderUnavailable(f"ffmpeg could not encode the video: {_last_line(done.stderr)}")


def _frames_in(ffmpeg: str, capture: Path) -> int | None:
    """Frames in the capture, counted by ffprobe (packaged with ffmpeg) if it is there."""
    ffprobe = shutil.which("ffprobe", path=os.path.dirname(ffmpeg)) or shutil.which("ffprobe")
    if ffprobe is None:
        return None
    count = ["-count_packets", "-show_entries", "stream=nb_read_packets", "-of", "csv=p=0"]
    done = subprocess.run(
        [ffprobe, "-v", "error", "-select_streams", "v:0", *count, os.fspath(capture)],
        capture_output=True,
        text=True,
        timeout=FFMPEG_SLACK_S,
        check=False,
    )
    text = done.stdout.strip()
    return int(text) if done.returncode == 0 and text.isdigit() else None


def _last_line(stderr: bytes) -> str:
    lines = stderr.decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else "no message"


def video_of(html: str, *, settings: Settings, run_asks: bool) -> bytes | None:
    """The artifact's video when the run or this worker records them, else None.

    A recording that fails costs the verdict nothing: it is logged and the verdict is
    kept without a video.

    Args:
        html: The artifact that was just judged.
        settings: This worker's settings (``verify_record``, ``verify_record_s``,
            ``chromium_path``).
        run_asks: The run was started with ``--record``.
    """
    if not (run_asks or settings.verify_record):
        return None
    try:
        return record_bytes(
            html, seconds=settings.verify_record_s, executable_path=settings.chromium_path
        )
    except RecorderUnavailable as exc:
        logger.warning("could not record the artifact; its verdict has no video: %s", exc)
        return None
