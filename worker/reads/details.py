"""What only the HTML report shows: memory over time and every session's latest verdict."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import and_, func, select
from sqlalchemy.engine import Connection

from worker.reads.figures import RunFigures
from worker.reads.queries import per_session
from worker.store.tables import samples, sessions, verifications, waves

__all__ = ["RssSeries", "RunDetail", "Shot", "load_details", "video_mp4"]


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
    session_id: int = 0
    screenshot_href: str | None = None
    """Where the full-size screenshot was written, relative to the page (:func:`write_assets`)."""
    video_href: str | None = None
    """Where the video was written, relative to the page."""
    transcript_href: str | None = None
    """Where the session's transcript page was written, relative to the report page."""


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
            sessions.c.id,
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
            session_id=r[14],
        )
        for r in rows
    ]
    return RunDetail(sorted(series.values(), key=lambda s: (s.role, s.host, s.pid)), gallery)


def video_mp4(conn: Connection, verification_id: int) -> bytes | None:
    """The video kept with a verdict, if it has one."""
    value = conn.execute(
        select(verifications.c.video_mp4).where(verifications.c.id == verification_id)
    ).scalar()
    return None if value is None else bytes(value)
