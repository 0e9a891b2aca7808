"""``scheduler serve``: the read-only web view of the store, on uvicorn.

Starlette and uvicorn are imported here only when the command runs, so no other command
loads them (as the report loads matplotlib only when it draws).
"""

from __future__ import annotations

import socket

import click

from scheduler.cli.services import OperatorError, open_store, safe_url
from worker.models.pricing import PriceTable
from worker.settings import Settings

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "serve"]

#: Interface ``serve`` listens on unless told otherwise: this machine only.
DEFAULT_HOST = "127.0.0.1"
#: Port ``serve`` listens on unless told otherwise.
DEFAULT_PORT = 8700


@click.command()
@click.option("--host", default=DEFAULT_HOST, show_default=True, help="Interface to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="Port to listen on (0: any free port, printed).",
)
@click.option(
    "--refresh-s",
    type=click.FloatRange(min=0.1),
    default=2.0,
    show_default=True,
    help="How often a run's page updates while the run goes on.",
)
@click.pass_obj
def serve(settings: Settings, host: str, port: int, refresh_s: float) -> None:
    """Serve a read-only web view of the store: the runs and ladders, each run's page
    updating live while it goes on, every session's transcript, and each artifact in a
    sandboxed frame. Pages ask for SWARM_SERVE_BASIC_AUTH=user:password when it is set;
    it must be to listen beyond the loopback interface."""
    from scheduler.serve.auth import is_loopback

    if settings.serve_basic_auth is None and not is_loopback(host):
        raise OperatorError(
            f"serve listens on {host}, beyond the loopback interface, and would show every "
            "transcript to anyone who reaches it: set SWARM_SERVE_BASIC_AUTH=user:password, "
            "or listen on 127.0.0.1"
        )
    import uvicorn

    from scheduler.serve.app import create_app

    prices = PriceTable.load(settings.prices_file)
    with open_store(settings) as engine, _listen(host, port) as sock:
        app = create_app(
            engine=engine, prices=prices, basic_auth=settings.serve_basic_auth, refresh_s=refresh_s
        )
        where = _address(sock)
        auth = "basic auth" if settings.serve_basic_auth is not None else "no auth (loopback)"
        click.echo(f"serving {safe_url(settings.database_url)} on {where} ({auth})", err=True)
        # Logging stays as the command line configured it (-v shows uvicorn's lines).
        config = uvicorn.Config(app, log_config=None, access_log=False, server_header=False)
        uvicorn.Server(config).run(sockets=[sock])


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``, so the address is known before serving."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        raise OperatorError(f"cannot listen on {host}:{port} ({exc.strerror or exc})") from None
    return sock


def _address(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"
