"""Who a worker process is, across the fleet: its host and its pid there.

A lease's owner, a worker's heartbeat on the broker and a resource sample name a process
as ``host:pid``. A host name alone does not tell whose pids those are: containers (or
hosts) can share a name (``hostname:`` in a compose file with replicas, a default image
host name) while each counts its pids from 1 in a PID namespace of its own. Two workers
would then share an owner and a heartbeat, and one's reconciler would take the other's
live process for dead because that pid is not running where it looks. So the host part is
the host name and a digest of the kernel's boot id and the PID namespace: equal exactly
for processes that see one another's pids, different after a reboot.
"""

from __future__ import annotations

import hashlib
import os
import socket
from functools import cache
from pathlib import Path

#: The kernel's id of the current boot: random at every boot of every machine.
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
#: Separates the host name from the digest of where its pids count.
SCOPE_SEP = "~"


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:  # not Linux: the host name alone, as before
        return ""


def _pid_namespace(pid: int | str) -> str:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return ""


def host_id(*, hostname: str | None = None, pid: int | None = None) -> str:
    """The host part of a process's name: ``hostname~digest``.

    Args:
        hostname: The host name; this process's by default.
        pid: A process (as this process sees it) whose PID namespace counts; this one's by
            default.
    """
    name = socket.gethostname() if hostname is None else hostname
    scope = f"{_read(BOOT_ID)}/{_pid_namespace('self' if pid is None else pid)}"
    digest = hashlib.sha256(scope.encode()).hexdigest()[:8]
    return f"{name}{SCOPE_SEP}{digest}"


@cache
def this_host() -> str:
    """:func:`host_id` of this process (it never changes while the process lives)."""
    return host_id()


def process_owner(pid: int | None = None) -> str:
    """The name ``host:pid`` of a process of this host; this process by default."""
    return f"{this_host()}:{os.getpid() if pid is None else pid}"
