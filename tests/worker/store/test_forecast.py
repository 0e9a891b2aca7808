"""Budget forecasting: the projection, its interval, and the wave it keeps from starting."""

from __future__ import annotations

import itertools

import pytest
from sqlalchemy import Engine, select

from tests.factories import add_usage, make_run
from worker.states import Outcome, RunStatus
from worker.store.endings import count_endings, end_session
from worker.store.engine import utcnow
from worker.store.forecast import forecast, project
from worker.store.tables import runs, sessions, waves
from worker.store.waves import take_outbox


def test_the_interval_narrows_as_sessions_end_and_closes_on_the_total() -> None:
    costs = [0.010, 0.014, 0.009, 0.012, 0.011, 0.013, 0.010, 0.012, 0.011, 0.010]
    widths = []
    for n in range(2, len(costs) + 1):
        f = project(costs[:n], sessions=len(costs), budget_usd=None)
        assert f is not None and f.low_usd <= f.projected_usd <= f.high_usd
        widths.append(f.high_usd - f.low_usd)
    assert all(later < earlier for earlier, later in itertools.pairwise(widths))
    last = project(costs, sessions=len(costs), budget_usd=None)
    assert last is not None and last.high_usd == pytest.approx(sum(costs))
    assert project(costs[:1], sessions=10, budget_usd=1.0) is None


def test_the_upper_bound_decides_against_the_budget() -> None:
    f = project([1.0, 1.2, 0.8, 1.1], sessions=40, budget_usd=44.0)
    assert f is not None and f.projected_usd == pytest.approx(41.0)
    assert f.over_budget and "over the $44.0000 budget" in f.describe()
    roomy = project([1.0, 1.2, 0.8, 1.1], sessions=40, budget_usd=60.0)
    assert roomy is not None and not roomy.over_budget


def _spend(engine: Engine, run_id: int, session_id: int, cost_usd: float) -> None:
    add_usage(engine, run_id=run_id, session_id=session_id, cost_usd=cost_usd)
    with engine.begin() as conn:
        end_session(conn, session_id=session_id, outcome=Outcome.verified, now=utcnow())
    count_endings(engine, now=utcnow(), session_ids=[session_id])


@pytest.mark.services
@pytest.mark.parametrize(("budget_usd", "stops"), [(0.5, True), (5.0, False)])
def test_a_wave_the_forecast_cannot_pay_does_not_start(
    engine: Engine, budget_usd: float, stops: bool
) -> None:
    # Given a 3x2 run whose first wave's sessions cost about $0.10 each
    run_id, ids = make_run(engine, waves="3x2", budget_usd=budget_usd)
    _spend(engine, run_id, ids[0], 0.10)
    _spend(engine, run_id, ids[1], 0.12)
    # When the outbox row of wave 2 is taken
    with engine.begin() as conn:
        projected = forecast(conn, run_id=run_id)
        sent = take_outbox(conn, now=utcnow(), run_id=run_id)
    assert projected is not None and projected.projected_usd == pytest.approx(0.66)
    with engine.connect() as conn:
        run = conn.execute(
            select(runs.c.status, runs.c.stop_reason).where(runs.c.id == run_id)
        ).one()
        outcomes = (
            conn.execute(
                select(sessions.c.outcome)
                .where(sessions.c.run_id == run_id)
                .order_by(sessions.c.index)
            )
            .scalars()
            .all()
        )
        wave_states = (
            conn.execute(
                select(waves.c.status).where(waves.c.run_id == run_id).order_by(waves.c.index)
            )
            .scalars()
            .all()
        )
    if stops:
        # Then over a $0.50 budget it does not start: the run is stopped by the forecast
        assert sent == []
        assert run.status == RunStatus.stopped.value
        assert run.stop_reason.startswith("forecast: $0.6600")
        assert outcomes == ["verified", "verified", *["forecast"] * 4]
        assert wave_states == ["finished"] * 3
    else:
        # and under a $5 budget it starts as usual
        assert [d.session_id for d in sent] == ids[2:4]
        assert run.status == RunStatus.running.value and run.stop_reason is None
