"""A run stopped by its budget forecast spends less than one stopped by the budget alone."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, func, select

from scheduler.cli import cli
from scheduler.cli.follow import until_finished
from tests.conftest import WorkerProcess
from tests.factories import duplicates, enqueue
from worker.settings import Settings
from worker.states import RunStatus
from worker.store.tables import sessions

pytestmark = [pytest.mark.services, pytest.mark.slow]

#: Seconds any whole run in these tests may take.
RUN_TIMEOUT_S = 150
#: About half of what the 3x4 run costs when it runs to its end (about $0.28).
BUDGET_USD = 0.15


def _outcomes(engine: Engine, run_id: int) -> dict[str | None, int]:
    with engine.connect() as conn:
        rows = conn.execute(
            select(sessions.c.outcome, func.count())
            .where(sessions.c.run_id == run_id)
            .group_by(sessions.c.outcome)
        ).all()
    return {outcome: int(n) for outcome, n in rows}


def test_the_forecast_stops_a_run_before_the_wave_its_budget_cannot_pay(
    settings: Settings,
    engine: Engine,
    start_worker: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    # Given a worker, and a 3x4 run whose budget pays about half of it, checked as turns
    # start (a call's worst case, reserved, would bind within the first wave)
    worker = start_worker(concurrency=4, SWARM_VERIFIER="static")
    args: tuple[str, ...] = (
        "--wave",
        "3x4",
        "--sim-latency-ms",
        "50",
        "--budget-usd",
        str(BUDGET_USD),
    )
    args += ("--reserve", "off")
    # When it runs with the forecast, and again (same seed) with the budget check alone
    forecast_run = enqueue(settings, *args, "--forecast", "on", seed=7)
    stopped = until_finished(engine, forecast_run, show=False, timeout_s=RUN_TIMEOUT_S)
    budget_run = enqueue(settings, *args, "--forecast", "off", seed=7)
    budgeted = until_finished(engine, budget_run, show=False, timeout_s=RUN_TIMEOUT_S)
    # Then the forecast stopped its run after the first wave, whose sessions all finished,
    assert stopped.status is RunStatus.stopped
    assert stopped.stop_reason is not None and stopped.stop_reason.startswith("forecast: ")
    assert _outcomes(engine, forecast_run) == {"verified": 4, "forecast": 8}
    # while the budget alone let the second wave start and cut its sessions short
    assert budgeted.status is RunStatus.finished
    assert budgeted.stop_reason is not None and budgeted.stop_reason.startswith("budget")
    assert _outcomes(engine, budget_run).get("budget", 0) > 4
    # and the forecast's run spent less, for as many verified artifacts
    assert stopped.cost_usd < budgeted.cost_usd
    assert stopped.verified >= budgeted.verified
    assert duplicates(engine) == {"usage": 0, "model_events": 0, "version_gaps": 0}
    assert worker.errors() == []
    # and status, the report and its HTML show the forecast against the budget
    assert stopped.forecast is not None and stopped.forecast.over_budget
    status = _cli(settings, "status", str(forecast_run))
    assert "forecast" in status and f"over the ${BUDGET_USD:.4f} budget" in status
    assert f"run {forecast_run} forecast: $" in _cli(settings, "report", str(forecast_run))
    html = tmp_path / "report.html"
    _cli(settings, "report", str(forecast_run), "--html", str(html))
    assert "forecast" in html.read_text()


def _cli(settings: Settings, *args: str) -> str:
    result = CliRunner().invoke(cli, ["--database-url", settings.database_url, *args])
    assert result.exit_code == 0, result.output
    return result.output
