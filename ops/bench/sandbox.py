# ruff: noqa: T201
"""What a verification in the Python sandbox costs: wall and CPU per hidden test.

Each repetition runs ``python -m scheduler run --task humaneval --wave 2x10`` (the embedded
default: one process, its own SQLite file, the sandbox queue consumed in-process) with
oracle and sloppy agents at zero model latency, then reads every verdict it recorded: the
hidden test's wall and CPU seconds as the sandbox measured them (its processes' own, through
``wait4``), and the verdict's elapsed time (claim, judgement and record). The baseline,
measured in the same repetition, is the floor the sandbox cannot go under: the same
interpreter started bare, unconfined (``python3 -I -S -c pass``), as many times as there
were verdicts; the ratio says what bubblewrap, the limits and the harness add.

    python -m ops.bench.sandbox                 # 3 repetitions of 2x10
    python -m ops.bench.sandbox --repeat 5 --wave 2x10 --json > sandbox.json
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click
from sqlalchemy import create_engine, select

from verifier.sandbox.bubblewrap import Sandbox
from worker.settings import Settings
from worker.store.tables import verifications

#: The check whose value carries the sandbox's own measurement.
HIDDEN_TEST = "hidden_test"


def _repetition(wave: str, seed: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="swarm-bench-sandbox-") as scratch:
        db = Path(scratch) / "bench.db"
        started = time.monotonic()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "scheduler",
                "run",
                "--task",
                "humaneval",
                "--wave",
                wave,
                "--sim-mix",
                "oracle,sloppy",
                "--sim-latency-ms",
                "0",
                "--seed",
                str(seed),
                "--database",
                f"sqlite:///{db}",
                "--json",
            ],
            cwd=scratch,
            capture_output=True,
            text=True,
            check=False,
        )
        run_s = time.monotonic() - started
        if done.returncode not in (0, 1):
            raise click.ClickException(f"the run failed: {done.stderr.strip()[-500:]}")
        engine = create_engine(f"sqlite:///{db}")
        try:
            with engine.connect() as conn:
                rows = conn.execute(
                    select(verifications.c.checks, verifications.c.elapsed_ms)
                ).all()
        finally:
            engine.dispose()
    walls, cpus, elapsed = [], [], []
    for checks, ms in rows:
        test = next((c for c in checks if c["name"] == HIDDEN_TEST), None)
        if test is None:
            continue
        walls.append(test["value"]["wall_s"])
        cpus.append(test["value"]["cpu_s"])
        elapsed.append(ms / 1000)
    return {
        "verdicts": len(walls),
        "run_s": run_s,
        "wall_s": statistics.median(walls),
        "wall_p95_s": _p95(walls),
        "cpu_s": statistics.median(cpus),
        "verdict_elapsed_s": statistics.median(elapsed),
        "baseline": _baseline(len(walls)),
    }


def _baseline(times: int) -> dict[str, float]:
    """Wall and CPU of the sandbox's interpreter started bare, ``times`` times (medians)."""
    python = str(Sandbox.from_settings(Settings()).python)
    walls, cpus = [], []
    for _ in range(times):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run([python, "-I", "-S", "-c", "pass"], check=True)
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return {"wall_s": statistics.median(walls), "cpu_s": statistics.median(cpus)}


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


@click.command()
@click.option("--wave", default="2x10", show_default=True, help="The run's wave spec.")
@click.option("--repeat", default=3, show_default=True, help="Repetitions (medians of them).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def main(wave: str, repeat: int, as_json: bool) -> None:
    """Median wall and CPU per sandboxed verification, against a bare interpreter."""
    if os.geteuid() != 0:
        print("note: not root, so the sandbox runs as this user", file=sys.stderr)
    reps = []
    for n in range(repeat):
        print(f"repetition {n + 1}/{repeat}: run --task humaneval --wave {wave}", file=sys.stderr)
        reps.append(_repetition(wave, seed=n + 1))
    summary = {
        key: statistics.median(r[key] for r in reps)
        for key in ("verdicts", "run_s", "wall_s", "wall_p95_s", "cpu_s", "verdict_elapsed_s")
    }
    base = {key: statistics.median(r["baseline"][key] for r in reps) for key in ("wall_s", "cpu_s")}
    summary["baseline_wall_s"], summary["baseline_cpu_s"] = base["wall_s"], base["cpu_s"]
    summary["wall_ratio"] = summary["wall_s"] / base["wall_s"]
    summary["cpu_ratio"] = summary["cpu_s"] / base["cpu_s"] if base["cpu_s"] else None
    if as_json:
        print(json.dumps({"wave": wave, "repetitions": reps, "summary": summary}, indent=2))
        return
    print(f"sandboxed verifications, {wave}, medians of {repeat} repetitions:")
    print(f"  verdicts per run        {summary['verdicts']:.0f}")
    print(
        f"  hidden test wall        {summary['wall_s'] * 1000:.1f} ms (p95 "
        f"{summary['wall_p95_s'] * 1000:.1f} ms)"
    )
    print(f"  hidden test CPU         {summary['cpu_s'] * 1000:.1f} ms")
    print(f"  verdict, claim to record {summary['verdict_elapsed_s'] * 1000:.1f} ms")
    print(
        f"  bare interpreter        {base['wall_s'] * 1000:.1f} ms wall, "
        f"{base['cpu_s'] * 1000:.1f} ms CPU"
    )
    ratio = summary["cpu_ratio"]
    print(
        f"  sandbox / bare          {summary['wall_ratio']:.2f}x wall, "
        + (f"{ratio:.2f}x CPU" if ratio is not None else "CPU not measurable")
    )
    print(f"  whole run               {summary['run_s']:.1f} s")


if __name__ == "__main__":
    main()
