"""A worker's name across the fleet: two hosts with one host name and the same pids."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.fleet.broker import dead_owners
from worker.fleet.identity import SCOPE_SEP, host_id, process_owner, this_host


@pytest.fixture
def other_pid_namespace() -> Iterator[int]:
    """A process (its pid here) that runs in a PID namespace of its own, as pid 1 there."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("unshare as root is needed for a PID namespace")
    proc = subprocess.Popen(["unshare", "--pid", "--fork", "sleep", "60"])
    try:
        pid = proc.pid
        children = Path(f"/proc/{pid}/task/{pid}/children")
        deadline = time.monotonic() + 10
        while not children.read_text().split() and time.monotonic() < deadline:
            time.sleep(0.05)
        yield int(children.read_text().split()[0])
    finally:
        proc.kill()
        proc.wait(10)


def test_this_process_is_named_by_its_host_name_and_pid() -> None:
    # Given this process, When it is named, Then the name is its host's and its pid
    host, _, pid = process_owner().rpartition(":")
    assert pid == str(os.getpid())
    assert host == this_host() == host_id(hostname=socket.gethostname(), pid=os.getpid())
    assert host.startswith(socket.gethostname() + SCOPE_SEP)


def test_same_host_name_other_pid_namespace_is_another_host(other_pid_namespace: int) -> None:
    # Given a process in another PID namespace under the same host name (a container
    # named like its neighbour, counting its pids from 1)
    other = host_id(pid=other_pid_namespace)
    # Then it is another host: its pid 1 is not this host's pid 1, and its worker is
    # never taken for dead because that pid does not run here
    assert other != this_host()
    assert other.split(SCOPE_SEP)[0] == socket.gethostname()
    assert dead_owners([f"{other}:999999"], host=this_host()) == []
    assert dead_owners([process_owner(999999)], host=this_host()) == [process_owner(999999)]
