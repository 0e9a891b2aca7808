"""The timing ledger of a real run on a real worker, as ``status`` and ``report`` show it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console
from sqlalchemy import Engine, func, select

from scheduler.cli.follow import until_finished
from scheduler.cli.views import status_view
from tests.conftest import WorkerProcess
from tests.factories import enqueue
from worker.fleet.dispatch import CeleryDispatcher
from worker.models.pricing import PriceTable
from worker.reads.figures import run_figures
from worker.reads.timings import Percentiles, percentile
from worker.settings import Settings
from worker.store.due import Dispatch
from worker.store.tables import runs, sessions, turn_timings, usage

#: Seconds the run and the duplicate's skip may take.
TIMEOUT_S = 120


def test_percentiles_by_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert Percentiles.of(values) == Percentiles(50.0, 95.0, 99.0)
    assert percentile([7.0], 99) == 7.0
    assert Percentiles.of([]) == Percentiles(None, None, None)


def _report(settings: Settings, *args: str) -> Any:
    from scheduler.cli.report import report as command

    result = CliRunner().invoke(command, list(args), obj=settings)
    assert result.exit_code == 0, result.output
    return result


def _duplicates(engine: Engine, run_id: int) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                select(runs.c.duplicate_turn_tasks).where(runs.c.id == run_id)
            ).scalar_one()
        )


@pytest.mark.services
def test_a_real_run_has_its_ledger_in_status_and_report(
    settings: Settings,
    engine: Engine,
    app: Any,
    start_worker: Callable[..., WorkerProcess],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a finished 1x3 sim run on a real worker, its model taking 100 ms a call
    start_worker()
    run_id = enqueue(settings, "--wave", "1x3", "--sim-latency-ms", "100")
    until_finished(engine, run_id, show=False, timeout_s=TIMEOUT_S)
    # When the task of a turn already committed is sent again
    with engine.connect() as conn:
        sid = conn.execute(
            select(sessions.c.id).where(sessions.c.run_id == run_id).limit(1)
        ).scalar_one()
    CeleryDispatcher(app).send(Dispatch(sid, "turn", 0))
    deadline = time.monotonic() + TIMEOUT_S
    while _duplicates(engine, run_id) == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    # Then the worker skipped it and the run counts it
    assert _duplicates(engine, run_id) == 1
    # and every committed turn has exactly one ledger row
    with engine.connect() as conn:
        committed = conn.execute(
            select(func.count()).select_from(usage).where(usage.c.run_id == run_id)
        ).scalar_one()
        timed = conn.execute(
            select(
                turn_timings.c.queue_ms, turn_timings.c.dispatch_ms, turn_timings.c.turn_no
            ).where(turn_timings.c.run_id == run_id)
        ).all()
    assert len(timed) == committed > 3
    assert all(row.queue_ms is not None for row in timed)
    # the worker sent every turn after the first itself, so it knows how long that took
    assert all(row.dispatch_ms is not None for row in timed if row.turn_no > 0)
    # and the report's figures sum the ledger up
    figures = json.loads(_report(settings, str(run_id), "--json").stdout)
    t = figures["timings"]
    assert t["turns"] == committed and t["duplicate_turn_tasks"] == 1
    o = t["overhead_ms"]
    assert 0 < o["p50"] <= o["p95"] <= o["p99"]
    assert t["phases_ms"]["model"]["p50"] >= 50
    assert t["cpu_ms"]["p50"] > 0
    assert sum(t["over_time"]["turns"]) == committed
    # and status prints it on one line, report in a table, the HTML page charts it
    with engine.connect() as conn:
        shown = run_figures(conn, run_id, prices=PriceTable.load(None))
    console = Console(record=True, width=300)
    console.print(status_view(shown))
    line = next(x for x in console.export_text().splitlines() if "turn overhead" in x)
    assert f"over {committed} turns" in line and "1 duplicate turn tasks" in line
    monkeypatch.setenv("COLUMNS", "240")
    assert "turn timings" in _report(settings, str(run_id)).output
    page = tmp_path / "r.html"
    _report(settings, str(run_id), "--html", str(page))
    html = page.read_text()
    assert "Turn timings" in html
    assert f'aria-label="turn overhead over time of run {run_id}"' in html
