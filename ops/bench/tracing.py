# ruff: noqa: T201
"""What tracing costs a turn: the same embedded sim run with traces off and on.

Each repetition runs ``python -m scheduler run`` in a scratch directory, once without
OpenTelemetry's variables and once with them pointing at a receiver (Arize Phoenix, started
here from its own virtualenv, or ``--endpoint``), alternating. It reads the worker CPU per
turn (p50 and mean) from the timing ledger of each run's status, then prints the medians of
each mode and on / off. The turn's CPU is its thread's: the exporter's batches are sent on
a thread of their own, which the ledger does not count.

    python -m ops.bench.tracing                          # 2x5, 200 ms sim latency, 3 reps
    python -m ops.bench.tracing --wave 2x10 --repeat 5 --endpoint http://127.0.0.1:4318
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import click

from ops.phoenix import DEFAULT_VENV, phoenix

#: Figures of one run that the summary takes the median of.
FIGURES = ("cpu_ms_p50", "cpu_mean_ms", "turns")


def run_once(*, wave: str, latency_ms: int, endpoint: str | None) -> dict[str, Any]:
    """One embedded run, traced to ``endpoint`` or not; its per-turn CPU from the ledger."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SWARM_", "OTEL_"))}
    env["SWARM_VERIFIER"] = "static"
    if endpoint is not None:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
        env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = f"{endpoint.rstrip('/')}/v1/traces"
    args = ["run", "--wave", wave, "--sim-latency-ms", str(latency_ms), "--json"]
    with tempfile.TemporaryDirectory(prefix="swarm-bench-tracing-") as workdir:
        result = subprocess.run(
            [sys.executable, "-m", "scheduler", *args],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
    if result.returncode != 0:
        raise click.ClickException(f"the run failed:\n{result.stderr[-2000:]}")
    timings = json.loads(result.stdout)["timings"]
    return {
        "cpu_ms_p50": timings["cpu_ms"]["p50"],
        "cpu_mean_ms": timings["cpu_mean_ms"],
        "turns": timings.get("turns") or timings.get("count") or 0,
    }


def medians(runs: list[dict[str, Any]]) -> dict[str, float]:
    """The median of each figure across runs."""
    return {k: statistics.median(float(r[k] or 0) for r in runs) for k in FIGURES}


@contextmanager
def receiver(endpoint: str | None, venv: Path) -> Iterator[str]:
    """``endpoint``, or a Phoenix started for the bench."""
    with nullcontext(endpoint) if endpoint else phoenix(venv) as url:
        assert url is not None
        yield url


@click.command()
@click.option("--wave", default="2x5", show_default=True, help="The runs' wave spec.")
@click.option("--sim-latency-ms", default=200, show_default=True, help="Sim model latency.")
@click.option("--repeat", default=3, show_default=True, help="Runs per mode.")
@click.option("--endpoint", default=None, help="An OTLP/HTTP receiver (default: Phoenix).")
@click.option(
    "--phoenix-venv",
    type=click.Path(path_type=Path),
    default=DEFAULT_VENV,
    show_default=True,
    help="Phoenix's virtualenv.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def main(
    wave: str,
    sim_latency_ms: int,
    repeat: int,
    endpoint: str | None,
    phoenix_venv: Path,
    as_json: bool,
) -> None:
    """Run the same sim run with traces off and on; print the worker CPU per turn."""
    runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    with receiver(endpoint, phoenix_venv) as url:
        for rep in range(repeat):
            for mode in ("off", "on"):
                figures = run_once(
                    wave=wave, latency_ms=sim_latency_ms, endpoint=url if mode == "on" else None
                )
                runs[mode].append(figures)
                print(
                    f"rep {rep + 1} tracing {mode:3}: worker CPU/turn p50 "
                    f"{figures['cpu_ms_p50']:.2f} ms, mean {figures['cpu_mean_ms']:.2f} ms",
                    file=sys.stderr,
                )
    off, on = medians(runs["off"]), medians(runs["on"])
    if as_json:
        print(json.dumps({"off": off, "on": on, "runs": runs}))
        return
    print(f"{wave}, sim latency {sim_latency_ms} ms, {repeat} runs per mode (medians):")
    for mode, m in (("off", off), ("on", on)):
        print(
            f"  tracing {mode:3}: worker CPU/turn p50 {m['cpu_ms_p50']:.2f} ms, "
            f"mean {m['cpu_mean_ms']:.2f} ms"
        )
    ratio = on["cpu_ms_p50"] / off["cpu_ms_p50"] if off["cpu_ms_p50"] else float("nan")
    delta = on["cpu_ms_p50"] - off["cpu_ms_p50"]
    print(f"  on / off: {ratio:.2f}x p50 ({delta:+.2f} ms per turn)")


if __name__ == "__main__":
    main()
