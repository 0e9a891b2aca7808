"""``serve``'s pages other than a run's: the list of runs and ladders, a ladder, a
session's transcript, and the health probe."""

from __future__ import annotations

from urllib.parse import quote

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response

from scheduler.report.transcript import render_transcript
from scheduler.serve.context import context_of, render
from worker.errors import InputError, RunNotFound
from worker.reads.ladders import ladder_figures
from worker.reads.listing import ladder_list, run_list
from worker.reads.transcript import VersionDiff, session_transcript

__all__ = ["favicon", "healthz", "index", "ladder_page", "transcript_page"]


def healthz(request: Request) -> PlainTextResponse:
    """``/healthz``: ``ok``, once the store answers; it shows nothing of what it holds."""
    with context_of(request).engine.connect() as conn:
        conn.exec_driver_sql("SELECT 1")
    return PlainTextResponse("ok\n", headers={"Cache-Control": "no-store"})


def favicon(request: Request) -> Response:
    """``/favicon.ico``: none, said without an error."""
    return Response(status_code=204)


def index(request: Request) -> HTMLResponse:
    """``/``: the runs and the ladders, newest first."""
    with context_of(request).engine.connect() as conn:
        runs, ladders = run_list(conn), ladder_list(conn)
    return render(request, "index.html.j2", runs=runs, ladders=ladders, title="Swarm")


def ladder_page(request: Request) -> HTMLResponse:
    """``/ladders/N``: the ladder's runs, tier by tier and profile by profile."""
    ctx = context_of(request)
    ladder_id = int(request.path_params["ladder_id"])
    with ctx.engine.connect() as conn:
        try:
            figures = ladder_figures(conn, ladder_id, prices=ctx.prices)
        except RunNotFound as exc:
            raise HTTPException(404, str(exc)) from None
    return render(request, "ladder.html.j2", ladder=figures, title=f"Ladder L{ladder_id}")


def transcript_page(request: Request) -> HTMLResponse:
    """``/sessions/N``: the session's transcript, as the report's transcript pages draw it,
    with its screenshots and videos served from here and each version linked to the
    artifact viewer."""
    session_id = int(request.path_params["session_id"])
    with context_of(request).engine.connect() as conn:
        try:
            transcript = session_transcript(conn, session_id=session_id)
        except InputError as exc:
            raise HTTPException(404, str(exc)) from None
    media = {
        v.verification_id: (
            f"/verifications/{v.verification_id}/screenshot.png" if v.has_screenshot else None,
            f"/verifications/{v.verification_id}/video.mp4" if v.has_video else None,
        )
        for turn in transcript.turns
        for v in turn.verdicts
    }

    def href(v: VersionDiff) -> str:
        return f"/sessions/{session_id}/artifacts/{v.version}/{quote(v.name)}"

    page = render_transcript(
        transcript,
        media=media,
        report_href=f"/runs/{transcript.run_id}",
        back_label=f"run {transcript.run_id}",
        version_href=href,
    )
    return HTMLResponse(page)
