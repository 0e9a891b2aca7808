"""``report --html``: one transcript page per session, linked from the report's gallery.

Each page is what ``show`` prints, drawn from the same read model
(:func:`worker.reads.transcript.session_transcript`): the turns with their requests,
calls, results and errors, every artifact version as a highlighted diff, and every verdict
with its checks, its screenshot and its video. A page is self-contained like the report:
inline CSS, the screenshots as ``data:`` URIs; only videos are files, as in the gallery.

The pages are files in the report's ``_files`` directory (``report_files/sessions/``), not
sections of the report: a run's transcripts hold every version of every artifact, which
would make one page of a large run weigh tens of megabytes, and a page per session can be
linked on its own. The report and its ``_files`` directory travel together already.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, PackageLoader, select_autoescape
from PIL import Image
from sqlalchemy.engine import Connection

from scheduler.report.format import duration, usd
from scheduler.report.gallery import assets_dir
from worker.reads.conversation import SHORT_ARG_CHARS
from worker.reads.details import RunDetail, Shot
from worker.reads.transcript import Transcript, VersionDiff, session_transcript, verdict_media

__all__ = ["SESSIONS_DIR", "render_transcript", "write_transcripts"]

#: The directory, inside the report's ``_files`` directory, of the transcript pages.
SESSIONS_DIR = "sessions"
#: Width in pixels of a verdict's screenshot as embedded in a transcript page.
SCREENSHOT_WIDTH_PX = 960


def write_transcripts(
    conn: Connection, details: Mapping[int, RunDetail], html_path: Path
) -> dict[int, RunDetail]:
    """Write each session's transcript page beside the report; link it from the gallery.

    Sessions are read and written one at a time, so a large run never sits in memory.

    Returns:
        ``details`` with every shot's ``transcript_href`` set.

    Raises:
        OSError: The directory or a page could not be written.
    """
    directory = assets_dir(html_path) / SESSIONS_DIR
    # Not ``parents=True``: a report asked for in a folder that does not exist is an error.
    directory.parent.mkdir(exist_ok=True)
    directory.mkdir(exist_ok=True)
    env = _environment()
    linked: dict[int, RunDetail] = {}
    for run_id, detail in details.items():
        shots = []
        for shot in detail.gallery:
            name = f"session-{shot.session_id}.html"
            transcript = session_transcript(conn, session_id=shot.session_id)
            media = _media(conn, transcript, shot, directory)
            page = render_transcript(
                transcript, media=media, report_href=f"../../{quote(html_path.name)}", env=env
            )
            (directory / name).write_text(page, encoding="utf-8")
            href = f"{quote(assets_dir(html_path).name)}/{SESSIONS_DIR}/{quote(name)}"
            shots.append(replace(shot, transcript_href=href))
        linked[run_id] = replace(detail, gallery=shots)
    return linked


def render_transcript(
    transcript: Transcript,
    *,
    media: Mapping[int, tuple[str | None, str | None]] | None = None,
    report_href: str | None = None,
    back_label: str = "report",
    version_href: Callable[[VersionDiff], str] | None = None,
    env: Environment | None = None,
) -> str:
    """A session's transcript page.

    Args:
        transcript: The session's transcript.
        media: By verification id: its screenshot as a ``data:`` URI and its video's
            address, relative to the page, each if it has one.
        report_href: The report the page links back to.
        back_label: What that link is called.
        version_href: The address of a page that shows an artifact version, if there is
            one (``serve`` has an artifact viewer; the report has none).
        env: A Jinja environment made by this module, to share between pages.
    """
    env = env or _environment()
    return env.get_template("transcript.html.j2").render(
        t=transcript,
        media=media or {},
        report_href=report_href,
        back_label=back_label,
        version_href=version_href,
        short=SHORT_ARG_CHARS,
    )


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("scheduler.report", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    env.filters.update(usd=usd, duration=duration, json=_json, diff_class=_diff_class)
    return env


def _media(
    conn: Connection, transcript: Transcript, shot: Shot, directory: Path
) -> dict[int, tuple[str | None, str | None]]:
    """Each verdict's screenshot as a ``data:`` URI and its video as a file beside the page
    (the gallery's file, when it is the verdict the gallery shows)."""
    media: dict[int, tuple[str | None, str | None]] = {}
    for turn in transcript.turns:
        for verdict in turn.verdicts:
            if not (verdict.has_screenshot or verdict.has_video):
                continue
            png, mp4 = verdict_media(conn, verdict.verification_id)
            screenshot = None if png is None else _data_uri(png)
            video = None
            if verdict.verification_id == shot.verification_id and shot.video_href:
                video = f"../{shot.video_href.split('/', 1)[1]}"
            elif mp4 is not None:
                name = f"session-{transcript.session_id}-round{verdict.round}.mp4"
                (directory / name).write_bytes(mp4)
                video = quote(name)
            media[verdict.verification_id] = (screenshot, video)
    return media


def _data_uri(png: bytes) -> str:
    """A screenshot as a JPEG ``data:`` URI, at most :data:`SCREENSHOT_WIDTH_PX` wide."""
    with Image.open(io.BytesIO(png)) as image:
        small = image.convert("RGB")
        small.thumbnail((SCREENSHOT_WIDTH_PX, SCREENSHOT_WIDTH_PX * 8))
        out = io.BytesIO()
        small.save(out, format="JPEG", quality=82, optimize=True)
    return "data:image/jpeg;base64," + base64.b64encode(out.getvalue()).decode("ascii")


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _diff_class(line: str) -> str:
    """The CSS class of one line of a unified diff."""
    if line.startswith(("+++", "---")):
        return "file"
    if line.startswith("@@"):
        return "hunk"
    if line.startswith("+"):
        return "add"
    if line.startswith("-"):
        return "del"
    return "ctx"
