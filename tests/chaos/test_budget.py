"""Scenario 7: an explorer-heavy run with a small budget stops at the budget.

Each model call's worst case is reserved against the budget before it is sent, and a
session whose call does not fit ends ``stopped``: the run never spends more than its budget,
however many turns are in flight. The budget forecast is off: it would stop the run before
waves 2 and 3 (it has tests of its own), and this is the cap it sits on.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import Engine, func, select

from scheduler.cli.follow import until_finished
from tests.chaos.checker import check_run
from tests.chaos.conftest import RUN_TIMEOUT_S
from tests.chaos.progress import outcome_counts
from tests.conftest import WorkerProcess
from worker.settings import Settings
from worker.store.tables import runs, usage

pytestmark = [pytest.mark.chaos, pytest.mark.services, pytest.mark.slow]

#: The run's budget, in dollars: a few turns of each session of the first wave.
BUDGET_USD = 0.10
#: Sessions that run at once (the wave size), hence turns that may be in flight.
WAVE_SIZE = 10


def test_a_small_budget_stops_the_run_at_the_budget(
    settings: Settings,
    engine: Engine,
    enqueue: Callable[..., int],
    start_worker: Callable[..., WorkerProcess],
    chaos_report: Callable[..., None],
) -> None:
    # Given a 3x10 run of mostly explorers (who loop) with a budget of a few turns each
    start_worker(concurrency=WAVE_SIZE)
    run_id = enqueue(
        settings.database_url,
        settings.broker_url,
        "--wave",
        f"3x{WAVE_SIZE}",
        "--sim-latency-ms",
        "100",
        "--sim-mix",
        "explorer=3,diligent=1",
        "--budget-usd",
        str(BUDGET_USD),
        "--forecast",
        "off",
    )
    # When it runs to its end
    until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
    # Then it spent no more than its budget, holds nothing, every session ended stopped or
    # succeeded, and the stop is recorded on the run
    figures = check_run(engine, run_id)
    with engine.connect() as conn:
        max_turn_usd = conn.execute(
            select(func.max(usage.c.cost_usd)).where(usage.c.run_id == run_id)
        ).scalar_one()
        reason, spent, reserved = conn.execute(
            select(runs.c.stop_reason, runs.c.spent_usd, runs.c.reserved_usd).where(
                runs.c.id == run_id
            )
        ).one()
    outcomes = outcome_counts(engine, run_id)
    chaos_report(
        figures,
        budget_usd=BUDGET_USD,
        spent_usd=f"{figures.cost_usd:.4f}",
        spent_share=f"{figures.cost_usd / BUDGET_USD:.3f}",
        largest_turn_usd=f"{max_turn_usd:.4f}",
        outcomes=outcomes,
        stop_reason=reason,
    )
    assert figures.cost_usd <= BUDGET_USD
    assert reserved == pytest.approx(0.0)
    assert spent == pytest.approx(figures.cost_usd)
    assert figures.clean, figures
    assert figures.status_count("stopped") + figures.status_count("succeeded") == 3 * WAVE_SIZE
    assert outcomes.get("budget", 0) > WAVE_SIZE  # all of waves 2 and 3 at least
    assert reason is not None and reason.startswith("budget")
