"""A worker cut off from its database stops taking work, and takes it again once the
database answers."""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Iterator

import pytest
from sqlalchemy.engine import make_url

from tests.chaos.progress import wait_until
from worker.fleet.intake import Intake
from worker.fleet.outage import Outage
from worker.settings import Settings
from worker.store.engine import make_engine

pytestmark = pytest.mark.services

#: Longest wait for the outage's thread to act.
ACT_TIMEOUT_S = 30.0


class _Control:
    """Records the remote-control commands the outage sends."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, object]] = []

    def cancel_consumer(self, queue: str, **kwargs: object) -> object:
        self.calls.append(("cancel_consumer", queue, kwargs["destination"]))
        return None

    def add_consumer(self, queue: str, **kwargs: object) -> object:
        self.calls.append(("add_consumer", queue, kwargs["destination"]))
        return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def link() -> Iterator[tuple[int, list[subprocess.Popen[bytes]]]]:
    """A port where the database answers only once a forwarder is started on it."""
    if shutil.which("socat") is None:
        pytest.skip("socat is not installed")
    started: list[subprocess.Popen[bytes]] = []
    yield _free_port(), started
    for proc in started:
        proc.kill()
        proc.wait(10)


def test_a_worker_takes_no_work_until_its_database_answers(
    settings: Settings, link: tuple[int, list[subprocess.Popen[bytes]]]
) -> None:
    # Given a worker whose database is out of reach
    port, forwarders = link
    target = make_url(settings.database_url)
    url = target.set(host="127.0.0.1", port=port).render_as_string(hide_password=False)
    engine = make_engine(settings.model_copy(update={"database_url": url}))
    control = _Control()
    outage = Outage(Intake(control), engine, probe_s=0.05)
    # When one of its tasks reports it, and then another
    assert outage.report(worker="w@h", queues=["sessions", "verify"])
    assert not outage.report(worker="w@h", queues=["sessions", "verify"])
    # Then it stops consuming its queues, once, and keeps trying the database
    wait_until("a few tries of the database", lambda: outage.tries >= 3, ACT_TIMEOUT_S)
    assert control.calls == [
        ("cancel_consumer", "sessions", ["w@h"]),
        ("cancel_consumer", "verify", ["w@h"]),
    ]
    assert outage.cut_off
    # When the database can be reached again
    forwarders.append(
        subprocess.Popen(
            [
                "socat",
                f"TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr",
                f"TCP:{target.host or '127.0.0.1'}:{target.port or 5432}",
            ]
        )
    )
    wait_until("the worker taking work again", lambda: not outage.cut_off, ACT_TIMEOUT_S)
    # Then it consumes the same queues again
    assert control.calls[2:] == [
        ("add_consumer", "sessions", ["w@h"]),
        ("add_consumer", "verify", ["w@h"]),
    ]
    engine.dispose()
