"""Private Redis and PostgreSQL servers that a chaos test may kill and restart.

The machine's shared Redis (6379) and PostgreSQL (5432) serve other people's tests at the
same time, so a scenario that takes a service down starts its own: a ``redis-server``
without persistence, or a throwaway PostgreSQL cluster (``initdb`` as the ``postgres``
user, since the tests run as root and PostgreSQL refuses to).
"""

from __future__ import annotations

import configparser
import contextlib
import glob
import os
import pwd
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from datetime import datetime
from pathlib import Path

import psycopg
import redis

#: Seconds a private server may take to accept connections.
READY_TIMEOUT_S = 30.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateRedis:
    """A ``redis-server`` on its own port, without RDB or AOF: a restart loses everything."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    def url(self, db: int = 0) -> str:
        """The ``redis://`` URL of database ``db``."""
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> PrivateRedis:
        """Start the server and wait until it answers PING."""
        self.proc = subprocess.Popen(
            [
                shutil.which("redis-server") or "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
                "--daemonize",
                "no",
                "--loglevel",
                "warning",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            try:
                self.client().ping()
                return self
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(f"redis-server did not start on {self.port}") from None
                time.sleep(0.05)

    def client(self) -> redis.Redis:
        """A fresh client (not pooled across a restart)."""
        return redis.Redis(
            host="127.0.0.1", port=self.port, socket_timeout=5, socket_connect_timeout=1
        )

    def server_run_id(self) -> str:
        """``INFO server`` ``run_id``: a new value on every start of the server."""
        return str(self.client().info("server")["run_id"])

    def kill(self) -> int:
        """SIGKILL the server, as a crash would; returns its exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        return self.proc.wait(10)

    def restart(self, down_s: float) -> None:
        """Kill the server, leave it down ``down_s`` seconds, start it on the same port."""
        self.kill()
        time.sleep(down_s)
        self.start()
        self.restarts += 1

    def stop(self) -> None:
        """Stop the server if it runs."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def _pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise FileNotFoundError(f"no PostgreSQL {name} under /usr/lib/postgresql/*/bin")
    return found[-1]


class PrivateCluster:
    """A throwaway PostgreSQL cluster on its own port and socket directory.

    PostgreSQL will not run as root, so the cluster is owned by the ``postgres`` user and
    every ``initdb``/``pg_ctl`` call goes through ``runuser``. The directory is made with
    :func:`tempfile.mkdtemp` (not pytest's ``tmp_path``, whose parents root keeps at 0700).
    """

    def __init__(self) -> None:
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="swarm-chaos-pg-"))
        self.data = self.root / "data"
        self.logfile = self.root / "postgres.log"
        self.restarts = 0
        user = pwd.getpwnam("postgres")
        os.chown(self.root, user.pw_uid, user.pw_gid)

    def _as_postgres(self, *args: str) -> None:
        subprocess.run(
            ["runuser", "-u", "postgres", "--", *args],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=120,
        )

    def _pg_ctl(self, *args: str) -> None:
        self._as_postgres(_pg_bin("pg_ctl"), "-D", str(self.data), "-w", "-t", "60", *args)

    def init(self) -> PrivateCluster:
        """``initdb`` (trust authentication, superuser ``postgres``) and start."""
        self._as_postgres(
            _pg_bin("initdb"),
            "-D",
            str(self.data),
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--no-sync",
        )
        # Durability is not under test here and fsync only slows a busy machine down;
        # a fast shutdown still checkpoints, so nothing committed is lost on restart.
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c max_connections=100"
        )
        self._pg_ctl("-l", str(self.logfile), "-o", options, "start")
        return self

    def url(self, database: str = "postgres") -> str:
        """A ``postgresql://`` URL of ``database`` on this cluster."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create a database; returns its URL."""
        with psycopg.connect(self.url(), autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def started_at(self) -> datetime:
        """``pg_postmaster_start_time()``: when the server last started."""
        with psycopg.connect(self.url(), connect_timeout=5) as conn:
            row = conn.execute("SELECT pg_postmaster_start_time()").fetchone()
        assert row is not None
        return row[0]  # type: ignore[no-any-return]

    def backend_pids(self, database: str) -> set[int]:
        """Pids of the client backends connected to ``database``, this one excluded."""
        with psycopg.connect(self.url(), connect_timeout=5) as conn:
            rows = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (database,),
            ).fetchall()
        return {int(r[0]) for r in rows}

    def restart(self) -> None:
        """``pg_ctl -m fast restart``: every backend is terminated, open work rolled back."""
        self._pg_ctl("-m", "fast", "restart")
        self.restarts += 1

    def destroy(self) -> None:
        """Stop the cluster at once and delete its files."""
        with contextlib.suppress(subprocess.CalledProcessError):  # never started, or down
            self._pg_ctl("-m", "immediate", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


#: The systemd unit that keeps a worker running on a bare host.
WORKER_UNIT = Path(__file__).resolve().parents[2] / "ops" / "systemd" / "swarm-worker@.service"


def unit_worker_args(instance: str, host: str) -> list[str]:
    """The worker arguments of :data:`WORKER_UNIT`'s ``ExecStart`` for ``instance``.

    Everything after ``python -m worker``, with systemd's ``%i`` and ``%H`` filled in, so a
    test starts the worker exactly as the unit does.
    """
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment, method-assign]
    parser.read(WORKER_UNIT)
    words = shlex.split(parser["Service"]["ExecStart"])
    start = words.index("worker", words.index("-m"))
    return [w.replace("%i", instance).replace("%H", host) for w in words[start + 1 :]]
