# ruff: noqa: T201
"""One host's worker processes, as the documented way runs them, and what they cost the host.

A host runs one ``python -m worker -Q sessions,verify -P gevent -c K`` process per core
(``ops/systemd/swarm-sessions@.service``, ``docker compose up --scale sessions=N``); the
processes share nothing but PostgreSQL and Redis. :class:`HostWorkers` starts them and
:class:`HostSampler` samples, until stopped, the figures a bench prints: the RSS of every
worker process summed, Redis's ``used_memory`` and the PostgreSQL connections to one
database. :class:`PostgresCpu` and :func:`cpu_seconds` give CPU time.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import threading
import time
from contextlib import suppress
from typing import Any

import psutil
import psycopg
import redis

from ops.bench.wave_memory import WORKER_TIMEOUT_S, Worker

#: A reconciler's log line naming how many tasks it sent again.
REDISPATCH_LINE = re.compile(r"reconciler re-dispatching (\d+) task")
#: The same line's reasons: from the outbox, of lapsed or dead leases, lost.
REDISPATCH_WHY = re.compile(
    r"(\d+) from the outbox, (\d+) of lapsed or dead leases, (\d+) lost \((\d+) missing "
    r"twice, (\d+) reserved by a silent worker, (\d+) overdue unseen\)"
)
#: A worker's line for a turn that waited past the pool's timeout for a connection.
POOL_WAIT_LINE = "no database connection free"


def _tree(pid: int) -> list[psutil.Process]:
    """A process and its children, those still alive."""
    with suppress(psutil.NoSuchProcess):
        proc = psutil.Process(pid)
        return [proc, *proc.children(recursive=True)]
    return []


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU seconds so far of these processes and their children."""
    total = 0.0
    for pid in pids:
        for proc in _tree(pid):
            with suppress(psutil.NoSuchProcess):
                times = proc.cpu_times()
                total += float(times.user + times.system)
    return total


def redis_server_cpu_s() -> float:
    """CPU seconds so far of every ``redis-server`` on the host (shared with other users)."""
    total = 0.0
    for proc in psutil.process_iter(["name"]):
        with suppress(psutil.Error):
            if proc.info["name"] == "redis-server":
                times = proc.cpu_times()
                total += float(times.user + times.system)
    return total


def host_cpu_s() -> float:
    """CPU seconds so far of the whole host, every process of every user (idle excluded)."""
    times = psutil.cpu_times()
    return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))


class HostWorkers:
    """``processes`` worker processes on both queues, each with ``concurrency`` slots."""

    def __init__(self, env: dict[str, str], *, processes: int, concurrency: int, pool: str) -> None:
        self.workers = [
            Worker(env, 0.25, concurrency=concurrency, pool=pool) for _ in range(processes)
        ]

    @property
    def pids(self) -> list[int]:
        """The worker processes' ids (each pool's children follow from them)."""
        return [w.proc.pid for w in self.workers]

    @property
    def alerts(self) -> list[str]:
        """Every process's log alerts, in process order."""
        return [a for w in self.workers for a in w.alerts]

    def redispatches(self) -> int:
        """Tasks the reconcilers of all the processes sent again, from their logs."""
        return sum(
            int(m.group(1)) for a in self.alerts if (m := REDISPATCH_LINE.search(a)) is not None
        )

    def redispatch_reasons(self) -> str:
        """Why the reconcilers sent tasks again, summed over their log lines, and how many
        times a turn waited past the pool's timeout."""
        sums = [0] * 6
        for alert in self.alerts:
            if (m := REDISPATCH_WHY.search(alert)) is not None:
                sums = [a + int(b) for a, b in zip(sums, m.groups(), strict=True)]
        outbox, lapsed, lost, missing, reserved, unseen = sums
        waits = sum(POOL_WAIT_LINE in alert for alert in self.alerts)
        return (
            f"{outbox} from the outbox, {lapsed} of lapsed or dead leases, {lost} lost "
            f"({missing} missing twice, {reserved} reserved by a silent worker, {unseen} "
            f"overdue with no view of the broker); {waits} wait(s) for a database "
            "connection past the pool's timeout"
        )

    def wait_ready(self) -> None:
        """Wait until every process has printed `` ready.``."""
        for worker in self.workers:
            worker.wait_ready()

    def stop(self) -> None:
        """Warm shutdown of every process at once, then wait; kill those that take too long."""
        for worker in self.workers:
            worker.proc.terminate()
        deadline = time.monotonic() + WORKER_TIMEOUT_S
        for worker in self.workers:
            # Told all at once, so they shut down side by side; Worker.stop then finds each
            # one exited (or, past the deadline, tells it again and kills it if it must).
            with suppress(subprocess.TimeoutExpired):
                worker.proc.wait(max(deadline - time.monotonic(), 0.1))
            worker.stop()


class HostSampler:
    """Summed worker RSS, Redis ``used_memory`` and PostgreSQL connections, sampled."""

    def __init__(
        self,
        *,
        pids: list[int],
        redis_url: str,
        pg_admin_url: str,
        database: str,
        interval_s: float = 0.5,
    ) -> None:
        self.pids = pids
        self.database = database
        self.interval_s = interval_s
        self.rss: list[tuple[float, int]] = []  # (monotonic time, bytes over all processes)
        self.redis_bytes: list[tuple[float, int]] = []
        self.pg_connections: list[tuple[float, int]] = []
        self._redis = redis.Redis.from_url(redis_url, socket_connect_timeout=5)
        # On the maintenance database, so the sampler's own connection is not counted.
        self._pg = psycopg.connect(pg_admin_url, autocommit=True, connect_timeout=5)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> HostSampler:
        """Sample now, then every ``interval_s`` in the background."""
        self._sample()
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling and close the sampler's connections."""
        self._done.set()
        self._thread.join()
        self._redis.close()
        self._pg.close()

    def idle(self, series: list[tuple[float, int]], before: float) -> float:
        """The median of ``series`` before ``before`` (the idle window)."""
        return statistics.median([v for at, v in series if at < before] or [0])

    @staticmethod
    def peak(series: list[tuple[float, int]], since: float) -> int:
        """The largest sample of ``series`` taken from ``since`` on."""
        return max((v for at, v in series if at >= since), default=0)

    def _loop(self) -> None:
        while not self._done.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        now = time.monotonic()
        rss = 0
        for pid in self.pids:
            for proc in _tree(pid):
                with suppress(psutil.NoSuchProcess):
                    rss += int(proc.memory_info().rss)
        self.rss.append((now, rss))
        with suppress(redis.RedisError):
            info = self._redis.info("memory")
            self.redis_bytes.append((now, int(info["used_memory"])))
        with suppress(psycopg.Error):
            row = self._pg.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (self.database,)
            ).fetchone()
            self.pg_connections.append((now, int(row[0]) if row else 0))


def database_bytes(pg_admin_url: str, database: str) -> int:
    """``pg_database_size`` of ``database``."""
    with psycopg.connect(pg_admin_url, autocommit=True, connect_timeout=5) as conn:
        row = conn.execute("SELECT pg_database_size(%s)", (database,)).fetchone()
    return int(row[0]) if row else 0


class PostgresCpu:
    """CPU of the PostgreSQL backends serving one database, sampled until stopped."""

    def __init__(self, database: str, interval_s: float = 0.25) -> None:
        self.database = database
        self.interval_s = interval_s
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> PostgresCpu:
        """Take a first sample, then keep sampling in the background."""
        self._sample()
        self._thread.start()
        return self

    def stop(self) -> float:
        """Stop; returns the CPU seconds the backends used while sampled."""
        self._done.set()
        self._thread.join()
        self._sample()
        return sum(self.last[pid] - self.first[pid] for pid in self.last)

    def _loop(self) -> None:
        while not self._done.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        for proc in psutil.process_iter(["name", "cmdline"]):
            with suppress(psutil.Error):
                line = " ".join(proc.info["cmdline"] or [])
                if not line.startswith("postgres:") or f" {self.database} " not in f"{line} ":
                    continue
                times = proc.cpu_times()
                cpu = float(times.user + times.system)
                self.first.setdefault(proc.pid, cpu)
                self.last[proc.pid] = cpu


def swarm_cpu(f: dict[str, Any]) -> float:
    """CPU per turn of what a host runs for Swarm: its workers, PostgreSQL and Redis."""
    return float(f["worker_cpu_ms_per_turn"] + f["pg_cpu_ms_per_turn"] + f["redis_cpu_ms_per_turn"])


def print_host(medians: dict[tuple[str, str], dict[str, Any]], processes: int) -> None:
    """The host's side of the medians: Redis, PostgreSQL, the database, re-dispatches."""
    print(
        f"\n{processes} worker process(es); CPU per turn of workers + PostgreSQL + Redis "
        "('swarm'), of the whole host with others' load ('host')"
    )
    print(
        f"{'shape':>7} {'pool':>7} {'ok':>6} {'swarm ms':>8} {'host ms':>8} {'redis ms':>8} "
        f"{'redis MiB':>9} {'+idle':>6} {'pg conns':>8} {'KiB/sess':>8} {'redisp':>6}"
    )
    for (n, pool), m in medians.items():
        print(
            f"{n:>7} {pool:>7} {m['succeeded']:>6g} {swarm_cpu(m):>8.2f} "
            f"{m['host_cpu_ms_per_turn']:>8.2f} {m['redis_cpu_ms_per_turn']:>8.2f} "
            f"{m['redis_peak_mib']:>9.1f} {m['redis_added_mib']:>6.1f} "
            f"{m['pg_connections_peak']:>8g} {m['db_bytes_per_session'] / 1024:>8.1f} "
            f"{m['redispatches']:>6g}"
        )
