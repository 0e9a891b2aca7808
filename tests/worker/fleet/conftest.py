"""What the fleet's tests share: an empty broker, the reconciler's probe of it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
import redis

from worker.celery import broker_probe
from worker.fleet.broker import RedisBrokerProbe


@pytest.fixture
def empty_broker(redis_url: str) -> None:
    # Session ids start again at 1 in every test: no message of an earlier test may remain.
    redis.Redis.from_url(redis_url).flushdb()


@pytest.fixture
def probe(app: Any) -> Iterator[RedisBrokerProbe]:
    found = broker_probe(app)
    assert found is not None
    yield found
    found.close()


def dead_pid() -> int:
    """The pid of a process of this host that has exited."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    pid = int(done.stdout)
    assert not psutil.pid_exists(pid)
    return pid
