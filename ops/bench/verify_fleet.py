# ruff: noqa: T201
"""What verifying in Chromium costs a fleet run: the same run judged in the browser and
judged statically.

Each repetition runs the same ``sim`` run (``--wave``, ``--seed``, ``--sim-latency-ms``)
twice, each on a fresh ``python -m worker -Q sessions,verify -P threads -c 100`` process
(:mod:`ops.bench.wave_memory`), one after the other: once with ``--verify task`` (every
handoff judged in Chromium on the ``verify`` queue) and once with ``--verify static``
(judged by the static checks in the handoff's own commit). It prints each run's wall time,
sessions succeeded, verdicts recorded (and how many in the browser), the worker's peak
RSS with Chromium's processes, then the medians and the ratio of wall times, browser over
static.

    python -m ops.bench.verify_fleet                           # 10x10 at 200 ms, 3 pairs
    python -m ops.bench.verify_fleet --repeat 1 --wave 2x5

It creates (and drops) its own database ``swarm_bench_<hex>`` and flushes its Redis db.
"""

from __future__ import annotations

import json
import signal
import statistics
import sys
from typing import Any, Literal

import click
from sqlalchemy import func, select

from ops.bench.wave_memory import bench_runtime, measure, print_alerts, service_options
from worker.config import WaveSpec
from worker.fleet.runtime import Runtime
from worker.store.tables import sessions, verifications

#: Redis db used as the broker, flushed before and after.
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/9"
#: The two ways a run judges its handoffs, in the order each repetition runs them.
MODES: tuple[Literal["task", "static"], ...] = ("task", "static")
#: Figures of one run that the summary takes the median of.
MEDIAN_KEYS = ("wall_s", "succeeded", "total", "verdicts", "in_browser", "peak_mib", "turns")


def verdict_counts(rt: Runtime, run_id: int) -> tuple[int, int]:
    """Verdicts the run recorded, and how many of them Chromium gave."""
    query = (
        select(func.count(), func.count().filter(verifications.c.method == "browser"))
        .select_from(verifications.join(sessions, verifications.c.session_id == sessions.c.id))
        .where(sessions.c.run_id == run_id)
    )
    with rt.engine.connect() as conn:
        total, browser = conn.execute(query).one()
    return int(total), int(browser)


def line(label: str, f: dict[str, Any]) -> str:
    """One run (or a median) as a line."""
    return (
        f"{label}: {f['wall_s']:.1f} s, {f['succeeded']:g}/{f['total']:g} succeeded, "
        f"{f['verdicts']:g} verdicts ({f['in_browser']:g} in Chromium), {f['turns']:g} turns, "
        f"peak {f['peak_mib']:.0f} MiB with Chromium"
    )


@click.command(context_settings={"show_default": True})
@click.option("--wave", default="10x10", help="Wave spec of every run.")
@click.option("--repeat", type=click.IntRange(min=1), default=3, help="Pairs of runs.")
@click.option("--seed", type=int, default=7, help="Seed of every run.")
@click.option("--sim-latency-ms", type=click.IntRange(min=0), default=200)
@service_options(DEFAULT_REDIS_URL)
def main(
    wave: str,
    repeat: int,
    seed: int,
    sim_latency_ms: int,
    idle_s: float,
    timeout_s: float,
    pg_admin_url: str,
    redis_url: str,
    as_json: bool,
) -> None:
    """Wall time of a run verified in Chromium against the same run judged statically."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM as Ctrl-C
    out = sys.stderr if as_json else sys.stdout
    spec = WaveSpec.parse(wave)
    reps: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    print(f"{spec} sim runs at {sim_latency_ms} ms, seed {seed}, {repeat} pair(s)", file=out)
    try:
        with bench_runtime(pg_admin_url, redis_url) as rt:
            for i in range(1, repeat + 1):
                for mode in MODES:
                    f = measure(
                        rt,
                        spec=spec,
                        seed=seed,
                        latency_ms=sim_latency_ms,
                        interval_s=0.5,
                        idle_s=idle_s,
                        timeout_s=timeout_s,
                        verify=mode,
                    )
                    f["verdicts"], f["in_browser"] = verdict_counts(rt, f["run"])
                    reps[mode].append(f)
                    print(line(f"{mode:>6} #{i}", f), file=out, flush=True)
                    print_alerts(f, out)
    except KeyboardInterrupt:
        print("interrupted; worker stopped, database dropped, Redis flushed", file=sys.stderr)
        sys.exit(130)
    med = {
        mode: {k: statistics.median(r[k] for r in runs) for k in MEDIAN_KEYS}
        for mode, runs in reps.items()
    }
    ratio = round(med["task"]["wall_s"] / med["static"]["wall_s"], 2)
    if as_json:
        summary = {
            "wave": str(spec),
            "seed": seed,
            "sim_latency_ms": sim_latency_ms,
            "median": med,
            "repetitions": reps,
            "wall_ratio": ratio,
        }
        print(json.dumps(summary, indent=2))
        return
    print(f"\nmedians of {repeat} pair(s)")
    for mode in MODES:
        print(line(f"{mode:>6}", med[mode]))
    print(f"wall time, verified in Chromium / judged statically = {ratio:.2f}x")


if __name__ == "__main__":
    main()
