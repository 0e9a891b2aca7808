# ruff: noqa: T201
"""What the budget forecast saves: a budgeted Gemini run stopped by its forecast, against
the same run (same seed) stopped by the budget check alone.

Each repetition and mode (``--forecast on``, then ``off``: the baseline) gets a fresh
database, a flushed Redis db, a fresh fake Gemini API and a real worker, as in
:mod:`ops.bench.cache_warm`. It prints per mode the dollars spent, the sessions verified,
the dollars per verified artifact and how the run ended, then the medians and the ratios.

    python -m ops.bench.forecast                       # 3x5 with a $0.20 budget, 3 reps
    python -m ops.bench.forecast --wave 3x4 --budget-usd 0.15 --repeat 1
"""

from __future__ import annotations

import json
from typing import Any, Literal

import click

from ops.bench.cache_warm import compare, shared_options
from worker.config import RunConfig, WaveSpec

#: The forecast on (the candidate), then off (the baseline: the budget check alone).
MODES: tuple[Literal["on", "off"], ...] = ("on", "off")
#: Figures of one repetition that the summary takes the median of.
MEDIAN_KEYS = ("cost_usd", "succeeded", "total", "wall_s", "log_alerts")


def line(label: str, f: dict[str, Any]) -> str:
    """One repetition (or a median) as a line."""
    per = f["cost_usd"] / f["succeeded"] if f["succeeded"] else float("nan")
    text = (
        f"{label}: ${f['cost_usd']:.6f}, {f['succeeded']:g}/{f['total']:g} verified "
        f"(${per:.6f} each), {f['wall_s']:.1f} s, worker log alerts: {f['log_alerts']:g}"
    )
    if f.get("status"):
        text += f"; {f['status']}: {f['stop_reason'] or '-'}"
    return text


@click.command(context_settings={"show_default": True})
@click.option("--wave", default="3x5", help="Wave spec of every run.")
@click.option("--budget-usd", type=float, default=0.20, help="The runs' budget.")
@click.option("--latency-ms", type=click.IntRange(min=0), default=300)
@shared_options
def main(wave: str, budget_usd: float, seed: int, as_json: bool, **opts: Any) -> None:
    """Run the same budgeted Gemini run with the forecast on and off; print both."""
    spec = WaveSpec.parse(wave)
    reps, med = compare(
        # The budget checked as turns start, as the forecast was measured against; the cap
        # that reserves each call has its own bench (ops.bench.budget).
        {
            mode: RunConfig(waves=str(spec), seed=seed, forecast=mode, reserve="off")
            for mode in MODES
        },
        label="forecast",
        keys=MEDIAN_KEYS,
        describe=line,
        verifier="static",
        budget_usd=budget_usd,
        **opts,
    )
    on, off = med["on"], med["off"]
    ratio = f"{on['cost_usd'] / off['cost_usd']:.3f}" if off["cost_usd"] else "n/a"
    if as_json:
        print(json.dumps({"forecast_on": on, "forecast_off": off, "ratio": ratio, "reps": reps}))
        return
    print(
        f"{spec} on {opts['model']}, budget ${budget_usd:g}, seed {seed}, "
        f"medians of {opts['repeat']}:"
    )
    print(line("  forecast on ", on))
    print(line("  forecast off", off))
    print(
        f"  on/off: $ {ratio} (saved ${off['cost_usd'] - on['cost_usd']:.6f}), "
        f"verified {on['succeeded']:g} vs {off['succeeded']:g}"
    )


if __name__ == "__main__":
    main()
