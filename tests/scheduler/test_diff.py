"""``scheduler diff RUN_A RUN_B``: two runs' figures side by side, with ratios."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from sqlalchemy import Engine

from scheduler.cli.follow import until_finished
from scheduler.report.diff import FIGURES
from tests.conftest import WorkerProcess
from tests.factories import enqueue
from tests.worker.runs.conftest import RUN_TIMEOUT_S, scheduler
from worker.models.pricing import PriceTable
from worker.reads.figures import run_figures
from worker.settings import Settings

pytestmark = [pytest.mark.services, pytest.mark.slow]


def test_two_runs_side_by_side(
    settings: Settings, engine: Engine, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given two finished runs of different profiles, the second with sloppy agents
    worker = start_worker()
    a_id = enqueue(settings, "--wave", "1x2", "--sim-latency-ms", "0", seed=3)
    b_id = enqueue(
        settings,
        "--wave",
        "1x3",
        "--sim-latency-ms",
        "0",
        "--profile",
        "baseline",
        "--sim-mix",
        "sloppy",
        seed=4,
    )
    until_finished(engine, a_id, show=False, timeout_s=RUN_TIMEOUT_S)
    until_finished(engine, b_id, show=False, timeout_s=RUN_TIMEOUT_S)
    # (its sampler tags the last samples with the run after the run ends)
    worker.stop()
    with engine.connect() as conn:
        a, b = (run_figures(conn, run_id, prices=PriceTable.load()) for run_id in (a_id, b_id))
    # When they are compared as JSON
    result = scheduler(settings, "diff", str(a_id), str(b_id), "--json")
    # Then every figure is there for both, read off the runs' own figures, with b / a
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (out["a"], out["b"]) == (a_id, b_id)
    assert list(out["figures"]) == [name for name, *_ in FIGURES]
    figures = out["figures"]
    assert figures["cost_usd"]["a"] == pytest.approx(a.total_usd)
    assert figures["cost_usd"]["b"] == pytest.approx(b.total_usd)
    assert figures["cost_usd"]["ratio"] == pytest.approx(b.total_usd / a.total_usd)
    assert figures["cache_share"]["a"] == pytest.approx(a.tokens.cache_share)
    assert figures["tool_errors"]["b"] == b.tool_errors.total > a.tool_errors.total
    if a.tool_errors.total == 0:
        assert figures["tool_errors"]["ratio"] is None
    assert figures["turns_per_session"]["b"] == b.turns_per_session_median
    assert figures["sessions"]["ratio"] == pytest.approx(1.5)
    peak = figures["peak_rss_bytes"]
    assert (peak["a"], peak["b"]) == (
        a.memory.sessions_peak_rss_bytes,
        b.memory.sessions_peak_rss_bytes,
    )
    # When they are compared as text
    text = scheduler(settings, "diff", str(a_id), str(b_id)).stdout
    # Then each figure is a row, with its ratio
    for label in ("cost", "$ per verified artifact", "cache share", "tool errors", "peak RSS"):
        assert label in text
    assert f"{b.total_usd / a.total_usd:.2f}x" in text and "1.50x" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("987654", "987655"), "error: no run 987654 (`python -m scheduler status`"),
        (("x", "1"), "error: run id 'x' is not a number"),
        (("0", "1"), "error: run id '0' is not a run id"),
    ],
)
def test_bad_run_ids_are_one_line(settings: Settings, args: tuple[str, str], message: str) -> None:
    result = scheduler(settings, "diff", *args)
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(message) and "Traceback" not in result.output
