"""Scenario 7b: workers die with model calls reserved against the run's budget.

Each kill leaves the dead worker's reservations on the run until its leases are taken over:
the new holder releases them before it reserves its own, and the dead worker's commits never
come. At the end nothing is held, what the run's row says it spent is exactly its usage rows,
and that never passed the budget.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest
from sqlalchemy import Engine, and_, func, select

from scheduler.cli.follow import until_finished
from tests.chaos.checker import check_run
from tests.chaos.conftest import FAST_RECOVERY_ENV, RUN_TIMEOUT_S
from tests.chaos.progress import outcome_counts
from tests.conftest import WorkerProcess
from tests.factories import duplicates
from worker.fleet.identity import process_owner
from worker.settings import Settings
from worker.store.claims import lease_free
from worker.store.tables import reservations, runs, sessions, usage

pytestmark = [pytest.mark.chaos, pytest.mark.services, pytest.mark.slow]

#: How many times the worker is killed with calls reserved.
KILLS = 3
#: The run's budget: the first wave's first calls fit at worst, and it binds before the end.
BUDGET_USD = 0.30
#: Longest wait for a moment with the worker's calls reserved and no killed turn pending.
KILL_WINDOW_TIMEOUT_S = 60.0


def _ledger(engine: Engine, run_id: int) -> tuple[float, float, int, float]:
    """The run's spent and reserved dollars, its reservation rows and its usage dollars."""
    with engine.connect() as conn:
        spent, reserved = conn.execute(
            select(runs.c.spent_usd, runs.c.reserved_usd).where(runs.c.id == run_id)
        ).one()
        held = conn.execute(
            select(func.count()).select_from(reservations).where(reservations.c.run_id == run_id)
        ).scalar_one()
        billed = conn.execute(
            select(func.coalesce(func.sum(usage.c.cost_usd), 0.0)).where(usage.c.run_id == run_id)
        ).scalar_one()
    return float(spent), float(reserved), int(held), float(billed)


def _wait_for_reserved_calls(engine: Engine, run_id: int, owner: str) -> int:
    """Wait until ``owner`` holds reservations of calls in flight and no killed turn is
    still pending (so no turn is killed twice); returns how many it holds."""
    s, r = sessions, reservations
    deadline = time.monotonic() + KILL_WINDOW_TIMEOUT_S
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            mine = conn.execute(
                select(func.count())
                .select_from(r.join(s, s.c.id == r.c.session_id))
                .where(
                    r.c.run_id == run_id,
                    r.c.lease_epoch == s.c.lease_epoch,
                    s.c.lease_owner == owner,
                    ~lease_free(func.now()),
                )
            ).scalar_one()
            pending = conn.execute(
                select(func.count()).where(
                    and_(s.c.run_id == run_id, s.c.status == "running", s.c.turn_attempts >= 2)
                )
            ).scalar_one()
            status = conn.execute(select(runs.c.status).where(runs.c.id == run_id)).scalar_one()
        if status != "running":
            raise AssertionError("the run ended before the worker could be killed")
        if mine >= 1 and pending == 0:
            return int(mine)
        time.sleep(0.05)
    raise TimeoutError("no moment with reserved calls in flight came")


def test_killed_workers_leak_no_reservation_and_count_nothing_twice(
    settings: Settings,
    engine: Engine,
    enqueue: Callable[..., int],
    start_worker: Callable[..., WorkerProcess],
    chaos_report: Callable[..., None],
) -> None:
    # Given a 3x10 run with a budget that binds, its calls slow enough to be caught in flight
    worker = start_worker(concurrency=10, **FAST_RECOVERY_ENV)
    run_id = enqueue(
        settings.database_url,
        settings.broker_url,
        "--wave",
        "3x10",
        "--sim-latency-ms",
        "600",
        "--budget-usd",
        str(BUDGET_USD),
        "--forecast",
        "off",
    )
    held_at_kills: list[int] = []
    within_budget: list[bool] = []
    # When the worker is SIGKILLed three times with calls reserved, a new one started each time
    for _ in range(KILLS):
        assert worker.proc is not None
        held_at_kills.append(
            _wait_for_reserved_calls(engine, run_id, process_owner(worker.proc.pid))
        )
        spent, reserved, _, _ = _ledger(engine, run_id)
        within_budget.append(spent + reserved <= BUDGET_USD + 1e-9)
        assert worker.stop(signal.SIGKILL) == -signal.SIGKILL
        worker = start_worker(concurrency=10, **FAST_RECOVERY_ENV)
    until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
    # Then every session ended, nothing is held, and the run's spending is its usage rows
    # (no call settled twice, none released twice), within the budget
    figures = check_run(engine, run_id)
    spent, reserved, held, billed = _ledger(engine, run_id)
    outcomes = outcome_counts(engine, run_id)
    chaos_report(
        figures,
        sigkills=KILLS,
        reservations_of_the_killed_worker=held_at_kills,
        budget_usd=BUDGET_USD,
        spent_usd=f"{spent:.6f}",
        usage_rows_usd=f"{billed:.6f}",
        reserved_usd_at_end=f"{reserved:.9f}",
        outcomes=outcomes,
    )
    assert all(n >= 1 for n in held_at_kills) and all(within_budget)
    assert held == 0 and reserved == pytest.approx(0.0, abs=1e-9)
    assert spent == pytest.approx(billed, abs=1e-9)
    assert spent <= BUDGET_USD
    assert figures.clean, figures
    assert duplicates(engine) == {"usage": 0, "model_events": 0, "version_gaps": 0}
    assert outcomes.get("budget", 0) >= 1  # the budget did bind
    assert worker.alive and worker.errors() == []
