"""The report's data beyond the figures: memory over time and every session's artifact."""

from __future__ import annotations

import base64
import io
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from urllib.parse import quote

from PIL import Image
from sqlalchemy import and_, func, select
from sqlalchemy.engine import Connection

from scheduler.report.figures import RunFigures
from worker.store.queries import per_session
from worker.store.tables import samples, sessions, verifications, waves

#: Width of a gallery thumbnail in CSS pixels.
THUMB_WIDTH_PX = 280


@dataclass(frozen=True)
class RssSeries:
    """The samples of one process that are tagged with a run, in time order."""

    role: str
    host: str
    pid: int
    at: list[datetime]
    rss_bytes: list[int]


@dataclass(frozen=True)
class Shot:
    """A session's final artifact as the verifier last judged it, for the gallery."""

    session_index: int
    wave: int
    persona: str
    status: str
    outcome: str | None
    turns: int
    cost_usd: float
    passed: bool | None
    """The latest verdict; None when the session was never judged."""
    method: str | None
    fps: float | None
    failing_checks: list[dict[str, str]]
    """``name`` and ``detail`` of each check the latest verdict failed."""
    screenshot_png: bytes | None = field(default=None, repr=False)
    run_id: int = 0
    verification_id: int | None = None
    """The latest verdict's row, where its video is kept."""
    has_video: bool = False
    """The latest verdict has a video (the run, or its verify worker, recorded it)."""
    screenshot_href: str | None = None
    """Where the full-size screenshot was written, relative to the page (:func:`write_assets`)."""
    video_href: str | None = None
    """Where the video was written, relative to the page."""

    def data_uri(self) -> str | None:
        """The screenshot, shrunk to a thumbnail, as a ``data:`` URI; None without one."""
        if self.screenshot_png is None:
            return None
        return "data:image/jpeg;base64," + base64.b64encode(thumbnail(self.screenshot_png)).decode(
            "ascii"
        )

    def thumb_size(self) -> tuple[int, int] | None:
        """Thumbnail width and height in CSS pixels, from the PNG header."""
        png = self.screenshot_png
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


@dataclass(frozen=True)
class RunDetail:
    """What only the HTML report shows: memory over time and every session's artifact."""

    rss: list[RssSeries]
    gallery: list[Shot]


def load_details(conn: Connection, runs: Sequence[RunFigures]) -> dict[int, RunDetail]:
    """Memory samples by process and the sessions' latest verdicts, for each run."""
    return {run.run_id: _detail(conn, run.run_id) for run in runs}


def _detail(conn: Connection, run_id: int) -> RunDetail:
    series: dict[tuple[str, str, int], RssSeries] = {}
    for role, host, pid, at, rss in conn.execute(
        select(samples.c.role, samples.c.host, samples.c.pid, samples.c.at, samples.c.rss_bytes)
        .where(samples.c.run_id == run_id)
        .order_by(samples.c.at)
    ):
        one = series.setdefault((role, host, pid), RssSeries(role, host, pid, [], []))
        one.at.append(at)
        one.rss_bytes.append(int(rss))
    v, per = verifications, per_session(run_id)
    last = (
        select(v.c.session_id, func.max(v.c.round).label("round"))
        .where(v.c.session_id.in_(select(sessions.c.id).where(sessions.c.run_id == run_id)))
        .group_by(v.c.session_id)
        .subquery()
    )
    rows = conn.execute(
        select(
            sessions.c.index,
            waves.c.index,
            sessions.c.persona,
            sessions.c.status,
            sessions.c.outcome,
            func.coalesce(per.c.turns, 0),
            func.coalesce(per.c.cost, 0.0),
            v.c.passed,
            v.c.method,
            v.c.fps,
            v.c.checks,
            v.c.screenshot_png,
            v.c.id,
            v.c.video_mp4.isnot(None),
        )
        .join(waves, waves.c.id == sessions.c.wave_id)
        .outerjoin(per, per.c.session_id == sessions.c.id)
        .outerjoin(last, last.c.session_id == sessions.c.id)
        .outerjoin(v, and_(v.c.session_id == last.c.session_id, v.c.round == last.c.round))
        .where(sessions.c.run_id == run_id)
        .order_by(sessions.c.index)
    ).all()
    gallery = [
        Shot(
            session_index=r[0],
            wave=r[1],
            persona=r[2],
            status=r[3],
            outcome=r[4],
            turns=int(r[5]),
            cost_usd=float(r[6]),
            passed=r[7],
            method=r[8],
            fps=r[9],
            failing_checks=[
                {"name": str(c.get("name")), "detail": str(c.get("detail", ""))}
                for c in (r[10] or [])
                if not c.get("passed")
            ],
            screenshot_png=r[11],
            run_id=run_id,
            verification_id=r[12],
            has_video=bool(r[13]),
        )
        for r in rows
    ]
    return RunDetail(sorted(series.values(), key=lambda s: (s.role, s.host, s.pid)), gallery)


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
                video = conn.execute(
                    select(verifications.c.video_mp4).where(
                        verifications.c.id == shot.verification_id
                    )
                ).scalar()
                if video is not None:
                    video_href = _write(directory, f"{stem}.mp4", video)
            shots.append(replace(shot, screenshot_href=screenshot_href, video_href=video_href))
        linked[run_id] = replace(detail, gallery=shots)
    return linked


def _write(directory: Path, name: str, data: bytes) -> str:
    directory.mkdir(exist_ok=True)
    (directory / name).write_bytes(data)
    return f"{quote(directory.name)}/{quote(name)}"
