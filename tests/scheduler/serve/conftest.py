"""Fixtures of the ``serve`` tests: the application on a real port, and real Chromium."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from pydantic import SecretStr
from sqlalchemy import Engine

from scheduler.serve.app import create_app
from verifier.chromium.binary import DEFAULT_CHROMIUM_PATH
from worker.models.pricing import PriceTable
from worker.settings import Settings
from worker.store.engine import make_engine

#: How often a run's page looks again in these tests.
TEST_REFRESH_S = 0.3
#: Chromium's flags here: no setuid sandbox as root, no GPU.
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip this directory's ``browser`` tests, with a reason, when Chromium is missing;
    in CI it is required."""
    if os.path.exists(DEFAULT_CHROMIUM_PATH) or os.environ.get("CI"):
        return
    skip = pytest.mark.skip(reason=f"Debian's Chromium is not installed at {DEFAULT_CHROMIUM_PATH}")
    here = Path(__file__).parent
    for item in items:
        if "browser" in item.keywords and here in Path(str(item.path)).parents:
            item.add_marker(skip)


@dataclass
class Served:
    """The application listening on 127.0.0.1, in a thread of the test process."""

    url: str
    server: uvicorn.Server
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)


@pytest.fixture
def serve_app() -> Iterator[Callable[..., Served]]:
    """Factory: serve the store of ``engine`` (or of ``database_url``) on a free port of
    127.0.0.1; every server is stopped afterwards."""
    started: list[Served] = []
    engines: list[Engine] = []

    def start(
        *,
        engine: Engine | None = None,
        database_url: str | None = None,
        basic_auth: str | None = None,
    ) -> Served:
        if engine is None:
            assert database_url is not None
            engine = make_engine(Settings(database_url=database_url))
            engines.append(engine)
        app = create_app(
            engine=engine,
            prices=PriceTable.load(None),
            basic_auth=SecretStr(basic_auth) if basic_auth else None,
            refresh_s=TEST_REFRESH_S,
        )
        # Bound and listening before the server runs: a request made at once waits in the
        # backlog until the server takes it.
        sock = socket.create_server(("127.0.0.1", 0))
        server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        served = Served(f"http://127.0.0.1:{sock.getsockname()[1]}", server, thread)
        started.append(served)
        return served

    yield start
    for served in started:
        served.stop()
    for engine in engines:
        engine.dispose()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """One headless Chromium for the module's tests."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=DEFAULT_CHROMIUM_PATH, args=BROWSER_ARGS, headless=True
        )
        yield browser
        browser.close()
