"""Fixtures of the chaos suite: private services to break, short leases, one report line.

Every scenario ends with one line of figures (see :mod:`tests.chaos.checker`) and the
proof that its fault fired. The line is printed at once (visible with ``-s``) and again
in a "chaos figures" section of the terminal summary, so a plain CI log shows it too.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from scheduler.cli import cli
from tests.chaos.checker import RunFigures
from tests.chaos.services import PrivateCluster, PrivateRedis
from worker.store.engine import migrate

#: Worker settings that make a dead worker's turns come back sooner than the defaults do.
#: A lease must outlive two renewal periods (Settings checks it).
FAST_RECOVERY_ENV = {
    "SWARM_LEASE_TTL_S": "5",
    "SWARM_LEASE_RENEW_S": "1",
    "SWARM_GEMINI_TIMEOUT_S": "2",
    "SWARM_LIMITER_WAIT_S": "1",
    "SWARM_REDISPATCH_AFTER_S": "3",
    "SWARM_VERIFY_REDISPATCH_AFTER_S": "3",
    "SWARM_RECONCILE_INTERVAL_S": "0.5",
}
#: Seconds a whole chaos run may take once its faults are over.
RUN_TIMEOUT_S = 150

_LINES = pytest.StashKey[list[str]]()


def _missing(what: str) -> None:
    if os.environ.get("CI"):
        raise RuntimeError(f"{what} is required in CI")
    pytest.skip(f"{what} is not installed")


@pytest.fixture
def chaos_report(request: pytest.FixtureRequest) -> Callable[..., None]:
    """Report one scenario: ``report(figures, **faults)`` prints a single line."""

    def report(figures: RunFigures | None, **faults: Any) -> None:
        fired = " ".join(f"{k}={v}" for k, v in faults.items())
        body = figures.line() if figures is not None else "no run"
        line = f"[chaos {request.node.name}] {body} | faults: {fired}"
        print("\n" + line)
        request.config.stash.setdefault(_LINES, []).append(line)

    return report


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    lines = config.stash.get(_LINES, [])
    if lines:
        terminalreporter.section("chaos figures")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    """A Redis of this test's own, on a free port, that the test may kill."""
    if shutil.which("redis-server") is None:
        _missing("redis-server")
    server = PrivateRedis(tmp_path).start()
    yield server
    server.stop()


@pytest.fixture
def private_pg() -> Iterator[tuple[PrivateCluster, str]]:
    """A PostgreSQL cluster of this test's own, migrated; yields it and the database URL."""
    if shutil.which("runuser") is None or not list(Path("/usr/lib/postgresql").glob("*/bin")):
        _missing("PostgreSQL server binaries (initdb, pg_ctl) or runuser")
    cluster = PrivateCluster()
    try:
        cluster.init()
        url = cluster.create_database("swarm_chaos")
        migrate("postgresql+psycopg://" + url.removeprefix("postgresql://"))
        yield cluster, url
    finally:
        cluster.destroy()


@pytest.fixture
def enqueue() -> Callable[..., int]:
    """``enqueue(database_url, broker_url, *args)``: create a sim run through the CLI."""

    def run(database_url: str, broker_url: str, *args: str) -> int:
        result = CliRunner().invoke(
            cli,
            [
                "--database-url",
                database_url,
                "--broker-url",
                broker_url,
                "enqueue",
                "--model",
                "sim",
                "--seed",
                "11",
                *args,
            ],
            catch_exceptions=False,
        )
        assert result.exit_code == 0, result.output
        return int(result.output.split()[1].rstrip(":"))

    return run
