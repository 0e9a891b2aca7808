# ruff: noqa: T201
"""Memory of one worker running a wave-shaped run, against a one-at-a-time baseline.

Measures, for a real ``python -m worker -P threads -c 100`` process on real
PostgreSQL and Redis running ``sim`` sessions: wall time, sessions succeeded, idle and peak
RSS of the worker (with its children), RSS added per concurrent session, turns, tokens, cost,
and whether the waves ran in order. Each repetition gets a fresh worker; the summary gives
medians, and the same figures for ``--baseline-wave`` with the candidate/baseline ratios.

    python -m ops.bench.wave_memory                      # 10x10 vs 10x1, 3 repetitions each
    python -m ops.bench.wave_memory --repeat 1 --wave 2x5 --baseline-wave 2x1 --sim-latency-ms 200

It creates (and drops) its own database ``swarm_bench_<hex>`` and flushes its Redis db.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from itertools import pairwise
from typing import Any, Literal

import click
import psutil
import psycopg
import redis
from psycopg import sql
from sqlalchemy.engine import make_url

from scheduler.cli.follow import until_finished
from worker.celery import create_app
from worker.config import RunConfig, WaveSpec
from worker.fleet.runtime import Runtime
from worker.reads.figures import RunFigures, WaveFigures
from worker.runs.create import create_run
from worker.settings import Settings
from worker.store.engine import migrate, require_migrated, utcnow

#: The server's maintenance database, where the bench creates and drops its own.
DEFAULT_PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
#: Redis db used as the broker, flushed before and after.
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/8"
#: Seconds a worker gets to print `` ready.``, and again to finish a warm shutdown.
WORKER_TIMEOUT_S = 60
#: Lines of the worker's log that the benches print: trouble, and every re-dispatch (in a
#: healthy run nothing is lost, so a task sent again is duplicate work to explain).
LOG_ALERTS = (
    ": WARNING/",
    ": ERROR/",
    ": CRITICAL/",
    "Traceback",
    "raised unexpected",
    "re-dispatching",
)
MIB = 1024 * 1024
#: Figures of one repetition that the summary takes the median of.
MEDIAN_KEYS = (
    "wall_s",
    "succeeded",
    "total",
    "peak_mib",
    "idle_mib",
    "mib_per_session",
    "turns",
    "tokens",
    "cost_usd",
    "log_alerts",
)


class Worker:
    """A ``python -m worker`` subprocess on both queues, its RSS sampled once ready."""

    def __init__(
        self, env: dict[str, str], interval_s: float, concurrency: int = 100, pool: str = "threads"
    ) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "worker",
                "-Q",
                "sessions,verify",
                "-P",
                pool,
                "-c",
                str(concurrency),
                "--without-gossip",
                "--without-mingle",
                "--loglevel",
                "INFO",
                "-n",
                f"bench-{secrets.token_hex(3)}@%h",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )  # Ctrl-C reaches the bench, which stops it warmly
        self.interval_s = interval_s
        self.alerts: list[str] = []
        self.tail: deque[str] = deque(maxlen=40)
        self.samples: list[tuple[float, int]] = []  # (monotonic time, RSS in bytes)
        self._ready = threading.Event()
        self._saw_ready = False
        self._done = threading.Event()
        threading.Thread(target=self._pump, daemon=True).start()

    def wait_ready(self) -> None:
        """Wait for `` ready.`` in the worker's log, then start sampling its RSS."""
        if not self._ready.wait(WORKER_TIMEOUT_S) or not self._saw_ready:
            raise RuntimeError("the worker did not become ready:\n" + "\n".join(self.tail))
        threading.Thread(target=self._sample, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.tail.append(line.rstrip())
            if " ready." in line:
                self._saw_ready = True
                self._ready.set()
            if any(alert in line for alert in LOG_ALERTS):
                self.alerts.append(line.rstrip())
        self._ready.set()  # exited: let the starter see it

    def _sample(self) -> None:
        process = psutil.Process(self.proc.pid)
        while not self._done.is_set():
            try:
                rss = int(process.memory_info().rss)
                for child in process.children(recursive=True):
                    with suppress(psutil.NoSuchProcess):
                        rss += int(child.memory_info().rss)
            except psutil.NoSuchProcess:
                return
            self.samples.append((time.monotonic(), rss))
            self._done.wait(self.interval_s)

    def stop(self) -> int:
        """Warm shutdown (SIGTERM) and wait; kill if it takes too long. Returns the exit code."""
        self._done.set()
        self.proc.terminate()  # a no-op once it has exited
        try:
            code = self.proc.wait(WORKER_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.alerts.append("bench: warm shutdown timed out, worker killed")
            self.proc.kill()
            code = self.proc.wait()
        if code != 0:
            self.alerts.append(f"bench: the worker exited with code {code}")
        return code


@contextmanager
def scratch_database(admin_url: str) -> Iterator[str]:
    """A fresh, migrated PostgreSQL database, dropped afterwards whatever happens."""
    name = f"swarm_bench_{secrets.token_hex(4)}"
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
        migrate(Settings(database_url=url).database_url)
        yield url
    finally:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@contextmanager
def scratch_redis(url: str) -> Iterator[str]:
    """A Redis db flushed before and after."""
    client = redis.Redis.from_url(url, socket_connect_timeout=5)
    client.flushdb()
    try:
        yield url
    finally:
        client.flushdb()
        client.close()


def service_options(redis_url: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The options benches share: idle window, timeout, the services, JSON output."""
    options = (
        click.option("--idle-s", type=click.FloatRange(min=0.5), default=3.0, help="Idle window."),
        click.option("--timeout-s", type=float, default=1800.0, help="Longest wait for one run."),
        click.option("--pg-admin-url", default=DEFAULT_PG_ADMIN_URL),
        click.option("--redis-url", default=redis_url),
        click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout."),
    )

    def apply(command: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            command = option(command)
        return command

    return apply


@contextmanager
def bench_runtime(pg_admin_url: str, redis_url: str) -> Iterator[Runtime]:
    """A runtime on a scratch database and a flushed Redis db, both cleaned up afterwards."""
    with scratch_database(pg_admin_url) as db_url, scratch_redis(redis_url) as broker:
        rt = create_app(Settings(database_url=db_url, broker_url=broker)).runtime
        try:
            require_migrated(rt.engine)
            yield rt
        finally:
            rt.engine.dispose()


def print_alerts(f: dict[str, Any], out: Any) -> None:
    """The worker's log alerts of one repetition, indented under its line."""
    for alert in f["alerts"]:
        print(f"    worker: {alert}", file=out)


def waves_in_order(waves: list[WaveFigures]) -> bool:
    """True when every wave finished, and each started after the previous one finished."""
    spans = [(w.started_at, w.finished_at) for w in sorted(waves, key=lambda w: w.index)]
    at = [(a, b) for a, b in spans if a is not None and b is not None]
    if len(at) < len(spans):
        return False
    return all(later[0] >= earlier[1] for earlier, later in pairwise(at))


def run_to_end(rt: Runtime, config: RunConfig, *, timeout_s: float) -> tuple[int, RunFigures]:
    """Create a sim run, start it, and follow it to its end; returns its id and figures."""
    with rt.engine.begin() as conn:
        run_id = create_run(conn, model="sim", config=config, now=utcnow())
    rt.flush_outbox(run_id)
    return run_id, until_finished(
        rt.engine, run_id, show=False, timeout_s=timeout_s, prices=rt.prices
    )


def measure(
    rt: Runtime,
    *,
    spec: WaveSpec,
    seed: int,
    latency_ms: int,
    interval_s: float,
    idle_s: float,
    timeout_s: float,
    verify: Literal["task", "static"] = "task",
) -> dict[str, Any]:
    """One repetition: a fresh worker, an idle window, one run to its end.

    ``verify`` is the run's: ``task`` judges each handoff in Chromium, ``static`` in the
    handoff's own commit.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWARM_")}
    env.update(SWARM_DATABASE_URL=rt.settings.database_url, SWARM_BROKER_URL=rt.settings.broker_url)
    worker = Worker(env, interval_s)
    try:
        worker.wait_ready()
        time.sleep(idle_s)  # the idle measurement window, not a wait for work
        idle = statistics.median(rss for _, rss in list(worker.samples))
        started = time.monotonic()
        config = RunConfig(waves=str(spec), seed=seed, sim_latency_ms=latency_ms, verify=verify)
        run_id, figures = run_to_end(rt, config, timeout_s=timeout_s)
        wall_s = time.monotonic() - started
        peak = max((rss for at, rss in list(worker.samples) if at >= started), default=idle)
    finally:
        worker.stop()
    return {
        "wave": str(spec),
        "run": run_id,
        "wall_s": round(wall_s, 2),
        "succeeded": figures.sessions.succeeded,
        "total": figures.sessions.total,
        "peak_mib": round(peak / MIB, 1),
        "idle_mib": round(idle / MIB, 1),
        "mib_per_session": round((peak - idle) / MIB / spec.size, 2),
        "turns": figures.turns,
        "tokens": figures.tokens.total,
        "cost_usd": round(figures.cost_usd, 6),
        "waves_in_order": waves_in_order(figures.waves),
        "log_alerts": len(worker.alerts),
        "alerts": worker.alerts[:20],
    }


def line(label: str, f: dict[str, Any]) -> str:
    """One repetition (or a median) as a line."""
    return (
        f"{label}: {f['wall_s']:.1f} s, {f['succeeded']:g}/{f['total']:g} succeeded, "
        f"peak {f['peak_mib']:.1f} MiB, idle {f['idle_mib']:.1f} MiB, "
        f"+{f['mib_per_session']:.2f} MiB/session, {f['turns']:g} turns, "
        f"{f['tokens']:,.0f} tokens, ${f['cost_usd']:.4f}, waves in order: "
        f"{'yes' if f['waves_in_order'] else 'NO'}, worker log alerts: {f['log_alerts']:g}"
    )


def medians(reps: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of each figure across repetitions; waves in order only if always."""
    out: dict[str, Any] = {k: statistics.median(r[k] for r in reps) for k in MEDIAN_KEYS}
    out["waves_in_order"] = all(r["waves_in_order"] for r in reps)
    return out


@click.command(context_settings={"show_default": True})
@click.option("--wave", default="10x10", help="Candidate wave spec.")
@click.option("--baseline-wave", default="10x1", help="Baseline wave spec.")
@click.option(
    "--repeat",
    type=click.IntRange(min=1),
    default=3,
    help="Repetitions of each, a fresh worker every time.",
)
@click.option("--seed", type=int, default=7, help="Seed of every run.")
@click.option("--sim-latency-ms", type=click.IntRange(min=0), default=1500)
@click.option("--interval-ms", type=click.IntRange(min=10), default=500, help="RSS sampling.")
@service_options(DEFAULT_REDIS_URL)
def main(
    wave: str,
    baseline_wave: str,
    repeat: int,
    seed: int,
    sim_latency_ms: int,
    interval_ms: int,
    idle_s: float,
    timeout_s: float,
    pg_admin_url: str,
    redis_url: str,
    as_json: bool,
) -> None:
    """Measure worker memory for a wave-shaped run against a one-at-a-time baseline."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM as Ctrl-C
    out = sys.stderr if as_json else sys.stdout
    specs = {"candidate": WaveSpec.parse(wave), "baseline": WaveSpec.parse(baseline_wave)}
    reps: dict[str, list[dict[str, Any]]] = {"candidate": [], "baseline": []}
    try:
        with bench_runtime(pg_admin_url, redis_url) as rt:
            for i in range(1, repeat + 1):
                for role, spec in specs.items():
                    f = measure(
                        rt,
                        spec=spec,
                        seed=seed,
                        latency_ms=sim_latency_ms,
                        interval_s=interval_ms / 1000,
                        idle_s=idle_s,
                        timeout_s=timeout_s,
                    )
                    reps[role].append(f)
                    print(line(f"{spec} #{i}", f), file=out, flush=True)
                    print_alerts(f, out)
    except KeyboardInterrupt:
        print("interrupted; worker stopped, database dropped, Redis flushed", file=sys.stderr)
        sys.exit(130)
    cand, base = medians(reps["candidate"]), medians(reps["baseline"])
    ratios = {
        k: round(cand[k] / base[k], 2) if base[k] else None
        for k in ("wall_s", "peak_mib", "idle_mib", "mib_per_session")
    }
    if as_json:
        print(
            json.dumps(
                {
                    "seed": seed,
                    "sim_latency_ms": sim_latency_ms,
                    "repeat": repeat,
                    "candidate": {"median": cand, "repetitions": reps["candidate"]},
                    "baseline": {"median": base, "repetitions": reps["baseline"]},
                    "ratios": ratios,
                },
                indent=2,
            )
        )
        return
    c, b = specs["candidate"], specs["baseline"]
    print(f"\nmedians of {repeat} repetition(s), seed {seed}, sim latency {sim_latency_ms} ms")
    print(line(f"{c!s:>7}", cand))
    print(line(f"{b!s:>7}", base))
    for key, label in (
        ("peak_mib", "peak RSS"),
        ("wall_s", "wall time"),
        ("mib_per_session", "RSS per concurrent session"),
    ):
        ratio = ratios[key]
        print(f"{label} {c} / {b} = " + (f"{ratio:.2f}x" if ratio is not None else "n/a"))


if __name__ == "__main__":
    main()
