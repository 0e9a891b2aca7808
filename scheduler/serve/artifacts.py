"""The artifact viewer, and the bytes it shows: artifact versions, screenshots, videos.

An artifact version is a page a model wrote. The viewer (``/sessions/N/artifacts/V/NAME``)
is one of the application's pages, with the artifact in an ``<iframe sandbox>``; the
artifact itself (``/raw/sessions/N/artifacts/V/NAME``) comes with
:data:`~scheduler.serve.policy.ARTIFACT_POLICY`, so even opened on its own it runs in an
opaque origin with no network. A version that is not HTML is shown as plain text.
"""

from __future__ import annotations

from urllib.parse import quote

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from scheduler.serve.context import context_of, render
from scheduler.serve.policy import ARTIFACT_POLICY, ARTIFACT_SANDBOX
from worker.errors import InputError
from worker.reads.recorded import RecordedVersion, artifact_version
from worker.reads.transcript import verdict_media

__all__ = ["artifact_raw", "artifact_viewer", "screenshot", "video"]

#: File name endings of the versions shown as pages; others are shown as plain text.
PAGE_SUFFIXES = (".html", ".htm")


def _version(request: Request) -> RecordedVersion:
    params = request.path_params
    session_id, version, name = int(params["session_id"]), int(params["version"]), params["name"]
    with context_of(request).engine.connect() as conn:
        try:
            return artifact_version(conn, session_id=session_id, name=name, version=version)
        except InputError as exc:
            raise HTTPException(404, str(exc)) from None


def artifact_viewer(request: Request) -> HTMLResponse:
    """``/sessions/N/artifacts/V/NAME``: the version in a sandboxed frame."""
    found = _version(request)
    session_id = int(request.path_params["session_id"])
    raw = f"/raw/sessions/{session_id}/artifacts/{found.version}/{quote(found.name)}"
    return render(
        request,
        "artifact.html.j2",
        title=f"Session {session_id}: {found.name} v{found.version}",
        session_id=session_id,
        version=found,
        size_bytes=len(found.content.encode("utf-8")),
        raw_href=raw,
        sandbox=ARTIFACT_SANDBOX,
    )


def artifact_raw(request: Request) -> Response:
    """``/raw/sessions/N/artifacts/V/NAME``: the version's bytes, in a sandbox of their own."""
    found = _version(request)
    page = found.name.lower().endswith(PAGE_SUFFIXES)
    return Response(
        found.content,
        media_type="text/html" if page else "text/plain",
        headers={
            "Content-Security-Policy": ARTIFACT_POLICY,
            "Cross-Origin-Resource-Policy": "same-origin",
            "Cache-Control": "no-store",
        },
    )


def _media(request: Request) -> tuple[bytes | None, bytes | None]:
    verification_id = int(request.path_params["verification_id"])
    with context_of(request).engine.connect() as conn:
        return verdict_media(conn, verification_id)


def screenshot(request: Request) -> Response:
    """``/verifications/N/screenshot.png``: the verdict's screenshot."""
    png, _ = _media(request)
    if png is None:
        raise HTTPException(404, "no screenshot")
    return Response(png, media_type="image/png")


def video(request: Request) -> Response:
    """``/verifications/N/video.mp4``: the verdict's video."""
    _, mp4 = _media(request)
    if mp4 is None:
        raise HTTPException(404, "no video")
    return Response(mp4, media_type="video/mp4")
