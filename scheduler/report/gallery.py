"""The report's gallery: thumbnails of the sessions' screenshots, and files beside the page."""

from __future__ import annotations

import base64
import io
import struct
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from urllib.parse import quote

from PIL import Image
from sqlalchemy.engine import Connection

from worker.reads.details import RunDetail, Shot, video_mp4

#: Width of a gallery thumbnail in CSS pixels.
THUMB_WIDTH_PX = 280


def data_uri(shot: Shot) -> str | None:
    """The screenshot, shrunk to a thumbnail, as a ``data:`` URI; None without one."""
    if shot.screenshot_png is None:
        return None
    return "data:image/jpeg;base64," + base64.b64encode(thumbnail(shot.screenshot_png)).decode(
        "ascii"
    )


def thumb_size(shot: Shot) -> tuple[int, int] | None:
    """Thumbnail width and height in CSS pixels, from the PNG header."""
    png = shot.screenshot_png
    if png is None or len(png) < 24 or png[12:16] != b"IHDR":
        return None
    width, height = struct.unpack(">II", png[16:24])
    return (THUMB_WIDTH_PX, max(1, round(height * THUMB_WIDTH_PX / width))) if width else None


def thumbnail(png: bytes) -> bytes:
    """A JPEG of the screenshot at twice the thumbnail's CSS width (sharp on dense screens).

    A full-size PNG is some 280 KB; embedded for every session of a large run, the page
    would weigh tens of megabytes.
    """
    with Image.open(io.BytesIO(png)) as image:
        small = image.convert("RGB")
        small.thumbnail((THUMB_WIDTH_PX * 2, THUMB_WIDTH_PX * 8))
        out = io.BytesIO()
        small.save(out, format="JPEG", quality=80, optimize=True)
    return out.getvalue()


def assets_dir(html_path: Path) -> Path:
    """The directory beside a report page that holds its full-size screenshots and videos."""
    return html_path.with_name(f"{html_path.stem}_files")


def write_assets(
    conn: Connection, details: Mapping[int, RunDetail], html_path: Path
) -> dict[int, RunDetail]:
    """Write each shot's full-size screenshot and video beside the page; link them.

    They are files, not ``data:`` URIs: a run's screenshots and videos weigh hundreds of
    megabytes, and a browser opens no ``data:`` link. Videos are read one at a time.

    Returns:
        ``details`` with every shot's ``screenshot_href`` and ``video_href`` set.

    Raises:
        OSError: The directory or a file could not be written.
    """
    directory = assets_dir(html_path)
    linked: dict[int, RunDetail] = {}
    for run_id, detail in details.items():
        shots = []
        for shot in detail.gallery:
            stem = f"run{run_id}-session{shot.session_index}"
            screenshot_href = video_href = None
            if shot.screenshot_png is not None:
                screenshot_href = _write(directory, f"{stem}.png", shot.screenshot_png)
            if shot.has_video and shot.verification_id is not None:
                video = video_mp4(conn, shot.verification_id)
                if video is not None:
                    video_href = _write(directory, f"{stem}.mp4", video)
            shots.append(replace(shot, screenshot_href=screenshot_href, video_href=video_href))
        linked[run_id] = replace(detail, gallery=shots)
    return linked


def _write(directory: Path, name: str, data: bytes) -> str:
    directory.mkdir(exist_ok=True)
    (directory / name).write_bytes(data)
    return f"{quote(directory.name)}/{quote(name)}"
