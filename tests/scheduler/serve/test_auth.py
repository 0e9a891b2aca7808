"""Basic auth of ``serve``, and its refusal to listen beyond loopback without it."""

from __future__ import annotations

import base64
import urllib.error
import urllib.request
from collections.abc import Callable

import pytest
from click.testing import CliRunner

from scheduler.cli.commands import EXIT_USAGE, cli
from scheduler.serve.auth import is_loopback
from tests.scheduler.serve.conftest import Served

pytestmark = [pytest.mark.slow]


def _get(url: str, *, credentials: str | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url)
    if credentials is not None:
        token = base64.b64encode(credentials.encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_pages_ask_for_the_credentials(
    sloppy_humaneval: str, serve_app: Callable[..., Served]
) -> None:
    # Given the application served with basic auth
    served = serve_app(database_url=sloppy_humaneval, basic_auth="admin:s3cret")
    for path in ("/", "/runs/1", "/runs/1/live", "/sessions/1", "/static/live.js"):
        # When a page is asked for without credentials, or with wrong ones
        status, headers, _ = _get(served.url + path)
        wrong, _, _ = _get(served.url + path, credentials="admin:guess")
        # Then it is refused with a challenge
        assert (status, wrong) == (401, 401), path
        assert headers["www-authenticate"].startswith('Basic realm="swarm"')
        # and with the credentials it is served
        assert _get(served.url + path, credentials="admin:s3cret")[0] == 200, path
    # Only the health probe is open, and it says nothing of the store
    assert _get(served.url + "/healthz")[::2] == (200, b"ok\n")


def test_pages_carry_their_policy(sloppy_humaneval: str, serve_app: Callable[..., Served]) -> None:
    # Given the application, without auth on loopback
    served = serve_app(database_url=sloppy_humaneval)
    # When a page and an artifact are asked for
    _, page, _ = _get(served.url + "/runs/1")
    _, raw, _ = _get(served.url + "/raw/sessions/1/artifacts/1/solution.py")
    # Then the page runs only its own scripts, and the artifact is a sandbox with no network
    assert "script-src 'self'" in page["content-security-policy"]
    assert "frame-ancestors 'none'" in page["content-security-policy"]
    policy = raw["content-security-policy"]
    assert policy.startswith("sandbox allow-scripts;")
    assert "connect-src 'none'" in policy and "default-src 'none'" in policy
    assert raw["content-type"].startswith("text/plain")


def test_serve_refuses_to_listen_beyond_loopback_without_credentials() -> None:
    # When serve is asked to listen on every interface without SWARM_SERVE_BASIC_AUTH
    result = CliRunner().invoke(cli, ["serve", "--host", "0.0.0.0"])
    # Then it refuses, in one line, and serves nothing
    assert result.exit_code == EXIT_USAGE
    assert len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith("error: serve listens on 0.0.0.0, beyond the loopback")
    assert "SWARM_SERVE_BASIC_AUTH=user:password" in result.stderr


def test_malformed_credentials_are_one_line_without_the_value() -> None:
    # When SWARM_SERVE_BASIC_AUTH has no password
    result = CliRunner().invoke(
        cli, ["serve"], env={"SWARM_SERVE_BASIC_AUTH": "admin-and-no-colon"}
    )
    # Then every command refuses in one line that names the variable, not its value
    assert result.exit_code == EXIT_USAGE
    assert result.stderr.strip() == (
        "error: SWARM_SERVE_BASIC_AUTH: must be user:password, both non-empty"
    )


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.4", False),
        ("example.org", False),
    ],
)
def test_what_counts_as_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
