# ruff: noqa: T201
"""Whether a budget holds at any concurrency: a Gemini run whose budget binds mid-wave, with
each model call reserved before it is sent, against the same run (same seed) whose budget
is checked as each turn starts (``--reserve off``: the baseline).

Each repetition and mode gets a fresh database, a flushed Redis db, a fresh fake Gemini API
and a real worker with ``--concurrency`` slots, as in :mod:`ops.bench.cache_warm`; the
forecast is off in both, so the budget itself is what stops the run. It prints per mode the
dollars spent as a share of the budget, the sessions verified, and the reservation's wall
time and worker CPU per turn (from the timing ledger), then the medians.

    python -m ops.bench.budget                          # 3x5 with a $0.20 budget, 3 reps
    python -m ops.bench.budget --wave 1x100 --budget-usd 0.75
    python -m ops.bench.budget --wave 1x1000 --budget-usd 7.5 --pool gevent --concurrency 1000
"""

from __future__ import annotations

import json
import statistics
from typing import Any, Literal

import click

from ops.bench.cache_warm import compare, shared_options
from worker.config import RunConfig, WaveSpec

#: Calls reserved before they are sent (the candidate), then the check at each turn's start.
MODES: tuple[Literal["on", "off"], ...] = ("on", "off")
#: Figures of one repetition that the summary takes the median of.
MEDIAN_KEYS = (
    "spent_share",
    "cost_usd",
    "succeeded",
    "total",
    "wall_s",
    "reserve_ms_p50",
    "reserve_cpu_ms_p50",
    "reserve_cpu_ms_p99",
    "log_alerts",
)


def line(label: str, f: dict[str, Any]) -> str:
    """One repetition (or a median) as a line."""
    text = (
        f"{label}: spent/budget {f['spent_share']:.3f} (${f['cost_usd']:.4f}), "
        f"{f['succeeded']:g}/{f['total']:g} verified, {f['wall_s']:.1f} s"
    )
    if f["reserve_cpu_ms_p50"]:
        text += (
            f", reserve p50 {f['reserve_ms_p50']:.2f} ms wall, CPU p50 "
            f"{f['reserve_cpu_ms_p50']:.3f} ms, p99 {f['reserve_cpu_ms_p99']:.3f} ms"
        )
    text += f", worker log alerts: {f['log_alerts']:g}"
    if f.get("status"):
        text += f"; {f['status']}: {f['stop_reason'] or '-'}"
    return text


@click.command(context_settings={"show_default": True})
@click.option("--wave", default="3x5", help="Wave spec of every run.")
@click.option("--budget-usd", type=float, default=0.20, help="The runs' budget.")
@click.option("--latency-ms", type=click.IntRange(min=0), default=300)
@click.option("--concurrency", type=click.IntRange(min=1), default=100, help="Worker slots.")
@click.option("--pool", type=click.Choice(["threads", "gevent"]), default="threads")
@shared_options
def main(wave: str, budget_usd: float, seed: int, as_json: bool, **opts: Any) -> None:
    """Run the same budgeted Gemini run with calls reserved and not; print both."""
    spec = WaveSpec.parse(wave)
    configs: dict[str, RunConfig] = {
        mode: RunConfig(waves=str(spec), seed=seed, forecast="off", reserve=mode) for mode in MODES
    }
    reps, _ = compare(
        configs,
        label="reserve",
        keys=(),
        describe=lambda label, rep: line(label, _with_share(rep, budget_usd)),
        verifier="static",
        budget_usd=budget_usd,
        **opts,
    )
    med = {mode: _medians([_with_share(r, budget_usd) for r in rs]) for mode, rs in reps.items()}
    on, off = med["on"], med["off"]
    if as_json:
        print(json.dumps({"reserve_on": on, "reserve_off": off, "reps": reps}))
        return
    print(
        f"{spec} on {opts['model']} through the SDK, {opts['concurrency']} {opts['pool']} "
        f"slots, budget ${budget_usd:g}, seed {seed}, medians of {opts['repeat']}:"
    )
    print(line("  reserve on ", on))
    print(line("  reserve off", off))


def _with_share(rep: dict[str, Any], budget_usd: float) -> dict[str, Any]:
    return {**rep, "spent_share": rep["cost_usd"] / budget_usd}


def _medians(reps: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in MEDIAN_KEYS:
        out[key] = statistics.median(float(r[key] or 0.0) for r in reps)
    return out


if __name__ == "__main__":
    main()
