# ruff: noqa: T201
"""CPU, memory and overhead of one host's workers as concurrency grows: 1x100 to 1x10000.

For each shape (N, or W waves of N: ``WxN``) and pool, ``--processes`` fresh workers (one per
core by default, as a host runs them: ``python -m worker -Q sessions,verify -P POOL -c K``
with K = N / processes, sharing nothing but PostgreSQL and Redis) run the waves of ``sim``
sessions (a fixed latency unless ``--sim-latency-jitter`` says), each judged by static checks
in its handoff's own commit. Printed per shape and pool: wall time and wall ÷ model floor (the
floor is, wave by wave, the longest session's turns times the sim latency: exact at a fixed
latency, a mean under jitter), peak RSS of all worker processes summed and RSS per concurrent
session, worker CPU per turn (all processes), PostgreSQL CPU per turn (the backends serving
the bench's database), Redis CPU per turn, the turn overhead p50/p99 from the timing ledger,
duplicate turn tasks, Redis ``used_memory`` peak, PostgreSQL connections peak, database bytes
per session and re-dispatches (the reconcilers' log lines); with several pools, each one's
figures over the last's. The sim's page generation is timed apart, in this process, since it
is the stand-in model's cost and not the runtime's.

    python -m ops.bench.scale                                  # 100, 500, 1000 at 5 s
    python -m ops.bench.scale --sizes 100,500 --sim-latency-ms 5000 --repeat 2
    python -m ops.bench.scale --sizes 1000 --sim-latency-ms 20000         # goal: <= 1.10x
    python -m ops.bench.scale --sizes 10000 --sim-latency-ms 60000 --timeout-s 1200
    python -m ops.bench.scale --sizes 1000 --pools gevent,threads --processes 1

It creates (and drops) its own database ``swarm_bench_<hex>`` and flushes its Redis db.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from typing import Any

import click
from sqlalchemy import Engine, func, inspect, select

from ops.bench.host import (
    HostSampler,
    HostWorkers,
    PostgresCpu,
    cpu_seconds,
    database_bytes,
    host_cpu_s,
    print_host,
    redis_server_cpu_s,
    swarm_cpu,
)
from ops.bench.wave_memory import (
    MIB,
    bench_runtime,
    print_alerts,
    run_to_end,
    service_options,
)
from worker.config import RunConfig, WaveSpec
from worker.fleet.runtime import Runtime
from worker.store.tables import artifact_versions, artifacts, runs, sessions, usage
from worker.tasks.dashboard.pages import render_dashboard

#: Redis db used as the broker, flushed before and after.
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/12"
#: Pools the bench can start a worker on (``celery worker -P``).
POOLS = ("gevent", "threads")
#: Figures compared pool against pool.
RATIO_KEYS = (
    ("floor_ratio", "wall/floor"),
    ("peak_mib", "peak MiB"),
    ("worker_cpu_ms_per_turn", "worker ms/turn"),
    ("pg_cpu_ms_per_turn", "pg ms/turn"),
    ("overhead_p50_ms", "ovh p50"),
)
#: Figures of one size that the summary takes the median of.
MEDIAN_KEYS = (
    "wall_s",
    "floor_ratio",
    "peak_mib",
    "mib_per_session",
    "worker_cpu_ms_per_turn",
    "turn_cpu_ms",
    "pg_cpu_ms_per_turn",
    "overhead_p50_ms",
    "overhead_p99_ms",
    "duplicates",
    "succeeded",
    "redis_cpu_ms_per_turn",
    "host_cpu_ms_per_turn",
    "redis_peak_mib",
    "redis_added_mib",
    "pg_connections_peak",
    "db_bytes_per_session",
    "redispatches",
)


def page_generation_ms(samples: int = 20) -> float:
    """Median milliseconds the sim takes to author one page (its own cost, not Swarm's)."""
    times = []
    for seed in range(samples):
        started = time.perf_counter()
        render_dashboard(seed)
        times.append((time.perf_counter() - started) * 1000)
    return float(statistics.median(times))


def _ledger(
    engine: Engine, run_id: int
) -> tuple[float | None, float | None, int | None, float | None]:
    """Overhead p50 and p99, duplicate turn tasks and the turns' own mean CPU, when the
    schema has the ledger."""
    if "turn_timings" not in inspect(engine).get_table_names():
        return None, None, None, None
    from worker.reads.timings import timing_figures

    with engine.connect() as conn:
        dup = conn.execute(
            select(runs.c.duplicate_turn_tasks).where(runs.c.id == run_id)
        ).scalar_one()
        t = timing_figures(conn, run_id, duplicates=int(dup))
    return t.overhead_ms.p50, t.overhead_ms.p99, t.duplicate_turn_tasks, t.cpu_mean_ms


def _sent(engine: Engine, run_id: int) -> tuple[float | None, float | None]:
    """The ledger's p50 statements and round trips per turn, when the schema has them."""
    columns = {c["name"] for c in inspect(engine).get_columns("turn_timings")}
    if "statements" not in columns:
        return None, None
    from worker.reads.timings import timing_figures

    with engine.connect() as conn:
        t = timing_figures(conn, run_id, duplicates=0)
    return t.statements.p50, t.round_trips.p50


def measure(
    rt: Runtime,
    *,
    shape: WaveSpec,
    pool: str,
    processes: int,
    seed: int,
    latency_ms: int,
    jitter: float,
    idle_s: float,
    timeout_s: float,
    pg_admin_url: str,
    worker_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One run of ``shape``'s waves on ``processes`` fresh workers, a slot per session."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWARM_")}
    env.update(
        SWARM_DATABASE_URL=rt.settings.database_url,
        SWARM_BROKER_URL=rt.settings.broker_url,
        SWARM_VERIFIER="static",
    )
    env.update(worker_env or {})
    size = shape.size
    database = rt.engine.url.database or ""
    host = HostWorkers(env, processes=processes, concurrency=math.ceil(size / processes), pool=pool)
    sampler: HostSampler | None = None
    try:
        host.wait_ready()
        sampler = HostSampler(
            pids=host.pids,
            redis_url=rt.settings.broker_url,
            pg_admin_url=pg_admin_url,
            database=database,
        ).start()
        time.sleep(idle_s)  # the idle measurement window, not a wait for work
        db0 = database_bytes(pg_admin_url, database)
        cpu0, redis0, host0 = cpu_seconds(host.pids), redis_server_cpu_s(), host_cpu_s()
        pg = PostgresCpu(database).start()
        started = time.monotonic()
        config = RunConfig(
            waves=f"{shape.waves}x{size}",
            seed=seed,
            sim_latency_ms=latency_ms,
            sim_latency_jitter=jitter,
            verify="static",
        )
        run_id, figures = run_to_end(rt, config, timeout_s=timeout_s)
        wall_s = time.monotonic() - started
        worker_cpu_s = cpu_seconds(host.pids) - cpu0
        redis_cpu_s, host_s = redis_server_cpu_s() - redis0, host_cpu_s() - host0
        pg_cpu_s = pg.stop()
        db_bytes = database_bytes(pg_admin_url, database) - db0
    finally:
        if sampler is not None:
            sampler.stop()
        host.stop()
    assert sampler is not None  # the run above raised otherwise
    idle = sampler.idle(sampler.rss, started)
    peak = sampler.peak(sampler.rss, started) or idle
    redis_idle = sampler.idle(sampler.redis_bytes, started)
    redis_peak = sampler.peak(sampler.redis_bytes, started)
    with rt.engine.connect() as conn:
        per_session = (
            select(sessions.c.wave_id, func.count().label("turns"))
            .select_from(usage.join(sessions, usage.c.session_id == sessions.c.id))
            .where(usage.c.run_id == run_id)
            .group_by(sessions.c.wave_id, usage.c.session_id)
            .subquery()
        )
        per_wave = (
            select(func.max(per_session.c.turns).label("longest"))
            .group_by(per_session.c.wave_id)
            .subquery()
        )
        longest = int(conn.execute(select(func.sum(per_wave.c.longest))).scalar() or 0)
        pages = conn.execute(
            select(func.count())
            .select_from(artifact_versions.join(artifacts).join(sessions))
            .where(sessions.c.run_id == run_id)
        ).scalar_one()
    turns = max(figures.turns, 1)
    floor_s = longest * latency_ms / 1000
    p50, p99, dup, turn_cpu = _ledger(rt.engine, run_id)
    statements, round_trips = _sent(rt.engine, run_id) if p50 is not None else (None, None)
    total = max(figures.sessions.total, 1)
    return {
        "shape": f"{shape.waves}x{size}",
        "pool": pool,
        "processes": processes,
        "size": size,
        "run": run_id,
        "wall_s": round(wall_s, 2),
        "floor_s": floor_s,
        "floor_ratio": round(wall_s / floor_s, 3) if floor_s else None,
        "succeeded": figures.sessions.succeeded,
        "total": figures.sessions.total,
        "turns": figures.turns,
        "pages": int(pages),
        "idle_mib": round(idle / MIB, 1),
        "peak_mib": round(peak / MIB, 1),
        "mib_per_session": round((peak - idle) / MIB / size, 3),
        "worker_cpu_ms_per_turn": round(worker_cpu_s * 1000 / turns, 2),
        "turn_cpu_ms": None if turn_cpu is None else round(turn_cpu, 2),
        "pg_cpu_ms_per_turn": round(pg_cpu_s * 1000 / turns, 2),
        "redis_cpu_ms_per_turn": round(redis_cpu_s * 1000 / turns, 2),
        "host_cpu_ms_per_turn": round(host_s * 1000 / turns, 2),
        "redis_peak_mib": round(redis_peak / MIB, 1),
        "redis_added_mib": round((redis_peak - redis_idle) / MIB, 1),
        "pg_connections_peak": sampler.peak(sampler.pg_connections, started),
        "db_bytes_per_session": round(db_bytes / total),
        "redispatches": host.redispatches(),
        "statements_p50": statements,
        "round_trips_p50": round_trips,
        "redispatch_reasons": host.redispatch_reasons(),
        "overhead_p50_ms": None if p50 is None else round(p50, 1),
        "overhead_p99_ms": None if p99 is None else round(p99, 1),
        "duplicates": dup,
        "log_alerts": len(host.alerts),
        "alerts": host.alerts[:10],
    }


def _fmt(value: Any, spec: str = "") -> str:
    return "n/a" if value is None else format(value, spec)


def line(f: dict[str, Any], page_ms: float) -> str:
    """One size as a line."""
    sim_cpu = page_ms * f["pages"] / max(f["turns"], 1)
    cpu = f["worker_cpu_ms_per_turn"]
    return (
        f"{f['shape']:<7} {f['pool']:<7} {f['succeeded']:g}/{f['total']:g} ok, "
        f"{f['turns']:g} turns, "
        f"wall {f['wall_s']:.1f} s = {_fmt(f['floor_ratio'], '.2f')}x floor, "
        f"peak {f['peak_mib']:.1f} MiB (+{f['mib_per_session']:.3f} MiB/session), "
        f"worker CPU {cpu:.2f} ms/turn ({cpu - sim_cpu:.2f} without sim pages, "
        f"{_fmt(f['turn_cpu_ms'], '.2f')} in the turn itself), "
        f"PostgreSQL CPU {f['pg_cpu_ms_per_turn']:.2f} ms/turn, "
        f"overhead p50 {_fmt(f['overhead_p50_ms'], '.1f')} ms "
        f"p99 {_fmt(f['overhead_p99_ms'], '.1f')} ms, "
        f"duplicate turn tasks {_fmt(f['duplicates'])}\n"
        f"{'':<15} host: {f['processes']} worker process(es), "
        f"Redis CPU {f['redis_cpu_ms_per_turn']:.2f} ms/turn, workers + PostgreSQL + Redis "
        f"{swarm_cpu(f):.2f} ms/turn (whole host, others' load too: "
        f"{f['host_cpu_ms_per_turn']:.2f}), Redis used_memory peak {f['redis_peak_mib']:.1f} MiB "
        f"(+{f['redis_added_mib']:.1f} over idle), PostgreSQL connections peak "
        f"{f['pg_connections_peak']}, database {f['db_bytes_per_session'] / 1024:.1f} KiB/session, "
        f"re-dispatches {f['redispatches']}: {f['redispatch_reasons']}; per turn (ledger "
        f"p50) {_fmt(f['statements_p50'], 'g')} statements and "
        f"{_fmt(f['round_trips_p50'], 'g')} round trips before its commit statement"
    )


@click.command(context_settings={"show_default": True})
@click.option(
    "--sizes",
    default="100,500,1000",
    help="Shapes, one run each: N (one wave of N sessions) or WxN (W waves of N).",
)
@click.option(
    "--pools",
    default="gevent",
    help="Worker pools, each run on every shape in turn: gevent, threads (a thread a slot).",
)
@click.option(
    "--processes",
    type=click.IntRange(min=1),
    default=os.cpu_count() or 1,
    help="Worker processes, as a host runs them: one per core, each with N / processes slots.",
)
@click.option("--repeat", type=click.IntRange(min=1), default=1, help="Runs of each size.")
@click.option("--seed", type=int, default=7)
@click.option("--sim-latency-ms", type=click.IntRange(min=0), default=5000)
@click.option(
    "--sim-latency-jitter",
    type=click.FloatRange(0, 1),
    default=0.0,
    show_default=True,
    help="Share by which one sim call's latency varies (0: fixed, the floor is exact).",
)
@click.option(
    "--worker-env",
    multiple=True,
    metavar="NAME=VALUE",
    help="A setting of the workers', e.g. SWARM_HISTORY_CACHE_MB=64 (repeatable).",
)
@service_options(DEFAULT_REDIS_URL)
def main(
    sizes: str,
    pools: str,
    processes: int,
    repeat: int,
    seed: int,
    sim_latency_ms: int,
    sim_latency_jitter: float,
    worker_env: tuple[str, ...],
    idle_s: float,
    timeout_s: float,
    pg_admin_url: str,
    redis_url: str,
    as_json: bool,
) -> None:
    """Measure one host's workers' CPU, memory and overhead per turn at growing concurrency."""
    out = sys.stderr if as_json else sys.stdout
    try:
        shapes = {s.strip(): WaveSpec.parse(s.strip()) for s in sizes.split(",") if s.strip()}
    except Exception as exc:
        raise click.BadParameter(str(exc), param_hint="--sizes") from None
    extra = dict(item.partition("=")[::2] for item in worker_env)
    if any(not name.startswith("SWARM_") for name in extra):
        raise click.BadParameter("name SWARM_* settings", param_hint="--worker-env")
    chosen = [p.strip() for p in pools.split(",") if p.strip()]
    if not chosen or any(p not in POOLS for p in chosen):
        raise click.BadParameter(f"pick from {', '.join(POOLS)}", param_hint="--pools")
    page_ms = page_generation_ms()
    print(f"sim page generation: {page_ms:.2f} ms per page (the stand-in model's)", file=out)
    reps: dict[tuple[str, str], list[dict[str, Any]]] = {
        (name, pool): [] for name in shapes for pool in chosen
    }
    try:
        with bench_runtime(pg_admin_url, redis_url) as rt:
            for _ in range(repeat):
                for (name, pool), done in reps.items():
                    f = measure(
                        rt,
                        shape=shapes[name],
                        pool=pool,
                        processes=processes,
                        seed=seed,
                        latency_ms=sim_latency_ms,
                        jitter=sim_latency_jitter,
                        idle_s=idle_s,
                        timeout_s=timeout_s,
                        pg_admin_url=pg_admin_url,
                        worker_env=extra,
                    )
                    done.append(f)
                    print(line(f, page_ms), file=out, flush=True)
                    print_alerts(f, out)
    except KeyboardInterrupt:
        print("interrupted; worker stopped, database dropped, Redis flushed", file=sys.stderr)
        sys.exit(130)
    except TimeoutError as exc:
        print(f"{exc}; workers stopped, database dropped, Redis flushed", file=sys.stderr)
        sys.exit(1)
    medians = {
        n: {
            k: (statistics.median(r[k] for r in rs) if all(r[k] is not None for r in rs) else None)
            for k in MEDIAN_KEYS
        }
        for n, rs in reps.items()
    }
    if as_json:
        keyed = {f"{n} {p}": v for (n, p), v in medians.items()}
        runs = {f"{n} {p}": v for (n, p), v in reps.items()}
        print(json.dumps({"page_ms": page_ms, "medians": keyed, "runs": runs}, indent=2))
        return
    print(
        f"\nmedians of {repeat} run(s), sim latency {sim_latency_ms} ms "
        f"(jitter ±{sim_latency_jitter:.0%})"
    )
    print(
        f"{'shape':>7} {'pool':>7} {'wall/floor':>10} {'peak MiB':>9} {'MiB/sess':>9} "
        f"{'wkr ms/turn':>11} {'in turn':>8} {'pg ms/turn':>10} {'ovh p50':>8} {'ovh p99':>8} "
        f"{'dup':>5}"
    )
    for (n, pool), m in medians.items():
        print(
            f"{n:>7} {pool:>7} {_fmt(m['floor_ratio'], '.2f'):>10} {m['peak_mib']:>9.1f} "
            f"{m['mib_per_session']:>9.3f} {m['worker_cpu_ms_per_turn']:>11.2f} "
            f"{_fmt(m['turn_cpu_ms'], '.2f'):>8} "
            f"{m['pg_cpu_ms_per_turn']:>10.2f} {_fmt(m['overhead_p50_ms'], '.1f'):>8} "
            f"{_fmt(m['overhead_p99_ms'], '.1f'):>8} {_fmt(m['duplicates'], 'g'):>5}"
        )
    print_host(medians, processes)
    if len(chosen) > 1:
        print_ratios(medians, list(shapes), chosen)


def print_ratios(
    medians: dict[tuple[str, str], dict[str, Any]], shapes: list[str], pools: list[str]
) -> None:
    """Each pool's figures over the last pool's (the baseline), shape by shape."""
    base = pools[-1]
    print(f"\nratios against {base}, same run")
    for name in shapes:
        for pool in pools[:-1]:
            cells = []
            for key, label in RATIO_KEYS:
                a, b = medians[(name, pool)][key], medians[(name, base)][key]
                cells.append(f"{label} {_fmt(a / b if a is not None and b else None, '.3f')}")
            print(f"{name:>7} {pool}/{base}: " + ", ".join(cells))


if __name__ == "__main__":
    main()
