"""What the browser may do on ``serve``'s pages, and on an artifact's page.

The application's own pages run only its own script (``/static/live.js``) and fetch only
from its own origin. An artifact is a page a model wrote: it is served with a policy that
makes it a sandbox of its own (``sandbox allow-scripts``: an opaque origin, so it can read
neither the application's pages nor its cookies or credentials), that lets it reach no
network at all (``default-src 'none'``, ``connect-src 'none'``; images and fonts from
``data:`` only), and that lets only the application frame it. The viewer embeds it in an
``<iframe sandbox="allow-scripts">`` too, without ``allow-same-origin``,
``allow-top-navigation`` or ``allow-popups``, and the viewer's own ``frame-src 'self'``
keeps the frame from being navigated anywhere else.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["APP_POLICY", "ARTIFACT_POLICY", "ARTIFACT_SANDBOX", "SecurityHeaders"]

#: The Content-Security-Policy of the application's own pages.
APP_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        # The transcript's styles are inline, as in the report's self-contained pages.
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "media-src 'self'",
        "connect-src 'self'",
        "frame-src 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
        "form-action 'none'",
    ]
)
#: The iframe ``sandbox`` flags of an artifact: its scripts run, and nothing else is allowed.
ARTIFACT_SANDBOX = "allow-scripts"
#: The Content-Security-Policy of an artifact's page, served on its own.
ARTIFACT_POLICY = "; ".join(
    [
        f"sandbox {ARTIFACT_SANDBOX}",
        "default-src 'none'",
        "script-src 'unsafe-inline'",
        "style-src 'unsafe-inline'",
        "img-src data:",
        "font-src data:",
        "media-src data:",
        "connect-src 'none'",
        "form-action 'none'",
        "base-uri 'none'",
        "frame-ancestors 'self'",
    ]
)
#: Headers every response gets, unless it set its own.
_DEFAULT_HEADERS = {
    "content-security-policy": APP_POLICY,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cross-origin-opener-policy": "same-origin",
}


class SecurityHeaders:
    """ASGI middleware: add :data:`APP_POLICY` and its companions to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer the request, with the headers added to the response's start."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in _DEFAULT_HEADERS.items():
                    if name not in headers:
                        headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)
