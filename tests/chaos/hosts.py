"""Several hosts on one machine: a worker per network namespace, joined through a bridge.

Each :class:`Host` is a network namespace with its own address on a Linux bridge of the
root namespace, and runs its worker under a UTS and a PID namespace of its own: its host
name differs from every other host's, while its process ids start at 1 like theirs, so
two hosts run workers with the same pids. PostgreSQL and Redis listen on 127.0.0.1 of the
root namespace only; a ``socat`` forwarder per service listens on the bridge's address and
carries the hosts' connections there.

A host is lost by SIGKILLing every process of its namespace, and partitioned by an
``nftables`` table in its namespace that drops everything through its link, or only what
goes to one service (connections stay open and their packets vanish, as on a cut cable),
healed by deleting the table. A host added with its own link reaches the services through
forwarders of its own (:mod:`tests.chaos.link`), which can hold every byte for a delay
while nftables drops a share of its packets: a slow, lossy link.
:meth:`TestBed.close` deletes the namespaces, the bridge and the forwarders, and kills
whatever still runs, whatever the test did.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from tests.chaos import link
from tests.chaos.progress import wait_until
from tests.conftest import WorkerProcess
from worker.fleet.identity import host_id

#: The commands the bed runs.
TOOLS = ("ip", "nft", "socat", "unshare")
#: The /16 the bed's /24 subnets are taken from.
SUBNETS = ipaddress.ip_network("10.231.0.0/16")
#: Seconds a forwarder may take to listen.
FORWARDER_READY_S = 10.0
#: Seconds a host's forwarders may take to follow a new delay.
LINK_TIMEOUT_S = 10.0


def _run(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True, timeout=30).stdout


def missing_tools() -> list[str]:
    """The bed's commands this machine lacks, and "root" if it runs unprivileged."""
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if os.geteuid() != 0:
        missing.append("root")
    return missing


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 of :data:`SUBNETS` that no interface of the root namespace uses."""
    used = {
        ipaddress.ip_interface(m).network
        for m in re.findall(r"inet (\S+)", _run("ip", "-4", "-o", "addr"))
    }
    candidates = [n for n in SUBNETS.subnets(new_prefix=24) if n not in used]
    return candidates[secrets.randbelow(len(candidates))]  # type: ignore[return-value]


class Host:
    """One simulated host: a network namespace, its address, its host name and its worker.

    Args:
        bed: The bed it is joined to.
        index: Its number on the bed (1, 2, …).
    """

    def __init__(self, bed: TestBed, index: int) -> None:
        self.bed = bed
        self.hostname = f"h{index}"
        self.netns = f"{bed.name}-{self.hostname}"
        self.link = f"{bed.name}v{index}"
        self.address = str(bed.subnet.network_address + 10 + index)
        self.worker: WorkerProcess | None = None
        self.partitioned = False
        self.slowed = False
        self.ports: dict[int, int] = {}
        """A service's port to this host's own forwarder's, if it has its own."""
        self.control = bed.workdir / f"{self.hostname}.delay"
        peer = f"{self.link}p"
        _run("ip", "netns", "add", self.netns)
        _run("ip", "link", "add", self.link, "type", "veth", "peer", "name", peer)
        _run("ip", "link", "set", peer, "netns", self.netns)
        _run("ip", "link", "set", self.link, "master", bed.bridge, "up")
        inside = ("ip", "-n", self.netns)
        _run(*inside, "link", "set", peer, "name", "eth0")
        _run(*inside, "addr", "add", f"{self.address}/{bed.subnet.prefixlen}", "dev", "eth0")
        _run(*inside, "link", "set", "eth0", "up")
        _run(*inside, "link", "set", "lo", "up")

    def start_worker(self, env: dict[str, str], args: list[str]) -> WorkerProcess:
        """Start ``python -m worker *args`` on this host (its worker pid is 1 in its own
        PID namespace); ``env`` names the services by the bed's URLs."""
        # ``unshare --fork`` makes the shell pid 1 of the new PID namespace, and ``exec``
        # hands pid 1 on to the worker; ``--mount-proc`` gives it a /proc of that namespace.
        prefix = [
            "ip",
            "netns",
            "exec",
            self.netns,
            "unshare",
            "--uts",
            "--pid",
            "--fork",
            "--mount-proc",
            "sh",
            "-c",
            'hostname "$0" && exec "$@"',
            self.hostname,
        ]
        self.worker = WorkerProcess(env, args, prefix=prefix).start()
        return self.worker

    def url(self, url: str) -> str:
        """How this host reaches the service at ``url`` (one the bed forwards)."""
        shared = self.bed.url(url)
        port = urlsplit(url).port
        if port not in self.ports:
            return shared
        parts = urlsplit(shared)
        netloc = parts.netloc.replace(f":{port}", f":{self.ports[port]}")
        return urlunsplit(parts._replace(netloc=netloc))

    def redis_rtt_ms(self, url: str, pings: int = 5) -> float:
        """The median time of a PING to the Redis at ``url``, as this host sees it."""
        probe = (
            "import redis, statistics, sys, time\n"
            "client = redis.Redis.from_url(sys.argv[1], socket_timeout=30)\n"
            "client.ping()\n"
            "times = []\n"
            "for _ in range(int(sys.argv[2])):\n"
            "    started = time.perf_counter()\n"
            "    client.ping()\n"
            "    times.append((time.perf_counter() - started) * 1000)\n"
            "print(statistics.median(times))\n"
        )
        out = _run(
            "ip",
            "netns",
            "exec",
            self.netns,
            sys.executable,
            "-c",
            probe,
            self.url(url),
            str(pings),
        )
        return float(out)

    def pids(self) -> list[int]:
        """Every process of this host, by its pid in the root namespace."""
        return [int(p) for p in _run("ip", "netns", "pids", self.netns).split()]

    def _worker_root_pid(self) -> int:
        """The worker's pid in the root namespace (the child ``unshare --fork`` made)."""
        assert self.worker is not None and self.worker.proc is not None
        pid = self.worker.proc.pid
        (child,) = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        return int(child)

    def worker_pid(self) -> int:
        """The worker's pid as its host sees it (its PID namespace's)."""
        status = Path(f"/proc/{self._worker_root_pid()}/status").read_text()
        match = re.search(r"^NSpid:\s+(.*)$", status, re.MULTILINE)
        assert match is not None
        return int(match.group(1).split()[-1])

    def owner(self) -> str:
        """The worker's name as the fleet knows it (lease owner, heartbeat): ``host:pid``."""
        host = host_id(hostname=self.hostname, pid=self._worker_root_pid())
        return f"{host}:{self.worker_pid()}"

    def kill(self) -> int:
        """SIGKILL every process of this host at once; returns how many there were."""
        pids = self.pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.worker is not None and self.worker.proc is not None:
            self.worker.proc.wait(30)
        return len(pids)

    def kill_worker(self) -> int:
        """SIGKILL this host's worker (its PID namespace, browsers and all, dies with it);
        returns its pid in the root namespace."""
        pid = self._worker_root_pid()
        os.kill(pid, signal.SIGKILL)
        if self.worker is not None and self.worker.proc is not None:
            self.worker.proc.wait(30)
        return pid

    def partition(self, ports: Iterable[int] = ()) -> None:
        """Drop every packet through this host's link, both ways, until :meth:`heal`; or
        only those of connections to ``ports`` (a service's), if any are named."""
        out_match = in_match = ""
        if ports:
            # A host with its own forwarders reaches a service at their port.
            listed = ", ".join(str(self.ports.get(p, p)) for p in ports)
            out_match, in_match = f" tcp dport {{ {listed} }}", f" tcp sport {{ {listed} }}"
        self._nft(
            "table inet swarm_partition {\n"
            "  chain in { type filter hook input priority -300; policy accept;"
            f' iifname "eth0"{in_match} drop; }}\n'
            "  chain out { type filter hook output priority -300; policy accept;"
            f' oifname "eth0"{out_match} drop; }}\n'
            "}\n"
        )
        self.partitioned = True

    def heal(self) -> None:
        """Undo :meth:`partition`."""
        _run("ip", "netns", "exec", self.netns, "nft", "delete", "table", "inet", "swarm_partition")
        self.partitioned = False

    def slow_link(self, delay_ms: float, loss_pct: float) -> None:
        """Hold every byte to and from the services ``delay_ms`` each way (this host's own
        forwarders, :mod:`tests.chaos.link`), and drop ``loss_pct`` % of the packets the
        host sends, until :meth:`fast_link`."""
        assert self.ports, "the host reaches the services through the bed's shared forwarders"
        self._set_delay(delay_ms)
        per_mille = round(loss_pct * 10)
        self._nft(
            "table inet swarm_loss {\n"
            "  chain out { type filter hook output priority -300; policy accept;"
            f' oifname "eth0" numgen random mod 1000 < {per_mille} drop; }}\n'
            "}\n"
        )
        self.slowed = True

    def fast_link(self) -> None:
        """Undo :meth:`slow_link`."""
        self._set_delay(0)
        _run("ip", "netns", "exec", self.netns, "nft", "delete", "table", "inet", "swarm_loss")
        self.slowed = False

    def mend(self) -> None:
        """Undo whatever fault of the link is still in place."""
        if self.partitioned:
            self.heal()
        if self.slowed:
            self.fast_link()

    def _set_delay(self, delay_ms: float) -> None:
        """Ask this host's forwarders for ``delay_ms`` each way, and wait until each holds
        bytes for that long (they read their control file every few hundred ms)."""
        text = f"{delay_ms}"
        self.control.write_text(f"{text}\n")
        held = [link.held_path(self.control, port) for port in self.ports.values()]

        def followed() -> bool:
            with contextlib.suppress(OSError):
                return all(path.read_text() == text for path in held)
            return False

        wait_until("the forwarders' new delay", followed, LINK_TIMEOUT_S)

    def _nft(self, rules: str) -> None:
        subprocess.run(
            ["ip", "netns", "exec", self.netns, "nft", "-f", "-"],
            input=rules,
            check=True,
            capture_output=True,
            text=True,
            timeout=30,
        )

    def browser_pids(self) -> list[int]:
        """This host's Chromium processes."""
        found = []
        for pid in self.pids():
            with contextlib.suppress(OSError):
                name = Path(f"/proc/{pid}/comm").read_text().strip()
                if name.startswith(("chrome", "chromium", "headless_shell")):
                    found.append(pid)
        return found

    def kill_browsers(self) -> int:
        """SIGKILL every Chromium process of this host; returns how many there were."""
        pids = self.browser_pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return len(pids)

    def stop_worker(self, timeout_s: float = 30.0) -> None:
        """Stop the worker warmly (SIGTERM), at once if it does not stop in time."""
        worker, self.worker = self.worker, None
        if worker is None or worker.proc is None:
            return
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        try:
            worker.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
        worker.stop(signal.SIGKILL)

    def close(self) -> None:
        """Kill what still runs here and delete the namespace (its link goes with it)."""
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self.kill()
        with contextlib.suppress(subprocess.SubprocessError):
            _run("ip", "netns", "delete", self.netns)


class TestBed:
    """A bridge, the hosts on it, and forwarders to the root namespace's services.

    Args:
        services: URLs (``redis://``, ``postgresql://``) of services on 127.0.0.1.
    """

    __test__ = False

    def __init__(self, services: list[str]) -> None:
        token = secrets.token_hex(2)
        self.name = f"sw{token}"
        self.bridge = f"{self.name}br"
        self.subnet = _free_subnet()
        self.gateway = str(self.subnet.network_address + 1)
        self.hosts: list[Host] = []
        self.forwarders: list[subprocess.Popen[str] | subprocess.Popen[bytes]] = []
        self.ports: list[int] = []
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{self.name}-"))
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        for url in services:
            self._forward(url)

    def _forward(self, url: str) -> None:
        """Forward ``url``'s port from the bridge to 127.0.0.1."""
        parts = urlsplit(url)
        port = parts.port
        assert parts.hostname in ("127.0.0.1", "localhost") and port is not None, url
        proc = subprocess.Popen(
            [
                shutil.which("socat") or "socat",
                f"TCP-LISTEN:{port},bind={self.gateway},fork,reuseaddr",
                f"TCP:127.0.0.1:{port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            # A group of its own: the child serving each connection dies with it.
            start_new_session=True,
        )
        self.forwarders.append(proc)
        deadline = time.monotonic() + FORWARDER_READY_S
        while f"{self.gateway}:{port} " not in _run("ss", "-Htln"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"no forwarder on {self.gateway}:{port}")
            time.sleep(0.05)
        self.ports.append(port)

    def add_host(self, *, own_link: bool = False) -> Host:
        """A new host on the bridge; with ``own_link``, it reaches the services through
        forwarders of its own, whose link :meth:`Host.slow_link` can slow down."""
        host = Host(self, len(self.hosts) + 1)
        self.hosts.append(host)
        if own_link:
            for port in self.ports:
                host.ports[port] = self._link(port, host.control)
        return host

    def _link(self, port: int, control: Path) -> int:
        """Start a :mod:`tests.chaos.link` forwarder from a free port of the bridge's
        address to ``port`` on 127.0.0.1; returns the port it listens on."""
        with socket.socket() as sock:
            sock.bind((self.gateway, 0))
            free = int(sock.getsockname()[1])
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.chaos.link",
                f"{self.gateway}:{free}",
                f"127.0.0.1:{port}",
                str(control),
            ],
            cwd=Path(__file__).resolve().parents[2],
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.forwarders.append(proc)
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "listening":
            raise RuntimeError(f"no forwarder on {self.gateway}:{free}")
        return free

    def url(self, url: str) -> str:
        """How a host reaches the service at ``url`` (one of those forwarded)."""
        parts = urlsplit(url)
        assert parts.port in self.ports, url
        netloc = parts.netloc.replace(
            f"{parts.hostname}:{parts.port}", f"{self.gateway}:{parts.port}"
        )
        return urlunsplit(parts._replace(netloc=netloc))

    def close(self) -> None:
        """Delete the hosts, the forwarders and the bridge."""
        for host in self.hosts:
            host.close()
        for proc in self.forwarders:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
            if proc.stdout is not None:
                proc.stdout.close()
        with contextlib.suppress(subprocess.SubprocessError):
            _run("ip", "link", "delete", self.bridge)
        shutil.rmtree(self.workdir, ignore_errors=True)
