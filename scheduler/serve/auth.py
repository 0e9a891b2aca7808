"""HTTP basic auth for ``serve``, and when it is required.

Every page asks for the credentials of ``SWARM_SERVE_BASIC_AUTH`` (``user:password``), as
Flower asks for its own; only the health probe is open, and it says nothing about the
store. Without credentials ``serve`` may listen on the loopback interface only: anyone who
can reach it could read every transcript.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import secrets

from pydantic import SecretStr
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["HEALTH_PATH", "REALM", "BasicAuth", "is_loopback"]

#: The path a health probe asks, without credentials.
HEALTH_PATH = "/healthz"
#: The realm a browser shows when it asks for the credentials.
REALM = "swarm"


def is_loopback(host: str) -> bool:
    """Whether listening on ``host`` keeps the server on this machine's loopback interface.

    ``localhost`` counts; any other name, and the wildcard addresses, do not.
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class BasicAuth:
    """ASGI middleware: a request without the credentials gets 401 and a challenge."""

    def __init__(self, app: ASGIApp, *, credentials: SecretStr) -> None:
        self.app = app
        self._expected = credentials.get_secret_value().encode("utf-8")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on if it carries the credentials (or asks for the probe)."""
        if scope["type"] != "http" or scope["path"] == HEALTH_PATH or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"www-authenticate", f'Basic realm="{REALM}", charset="UTF-8"'.encode()),
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"cache-control", b"no-store"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": b"credentials required\n"})

    def _allowed(self, scope: Scope) -> bool:
        for name, value in scope["headers"]:
            if name != b"authorization":
                continue
            scheme, _, token = value.partition(b" ")
            if scheme.lower() != b"basic":
                return False
            try:
                given = base64.b64decode(token.strip(), validate=True)
            except (binascii.Error, ValueError):
                return False
            # Constant time, so the answer's timing tells nothing about the credentials.
            return secrets.compare_digest(given, self._expected)
        return False
