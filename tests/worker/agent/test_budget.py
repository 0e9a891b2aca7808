"""The turn loop holds a run to its budget call by call: a call whose worst case does not
fit is never sent, and every hold is settled, released or kept as its call ends."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select

from tests.factories import ScriptedModel, call, make_run, model_turn, page
from worker.agent.budget import worst_case_usd
from worker.agent.turn import run_turn
from worker.errors import ModelUnavailable, TransientError
from worker.fleet.runtime import Runtime
from worker.models.base import ModelRequest, ModelTurn
from worker.store import reservations as reservations_store
from worker.store.tables import reservations, runs, sessions, turn_timings, usage

pytestmark = pytest.mark.services

#: A small output limit keeps a call's worst case near what the scripted turns cost.
MAX_OUTPUT_TOKENS = 256


def _turns(n: int) -> list[ModelTurn]:
    return [
        model_turn(call("manage_artifact", action="create", name=f"p{i}.html", content=page()))
        for i in range(n)
    ]


def _run_until_it_ends(rt: Runtime, sid: int, model: Any) -> list[str]:
    outcomes = []
    for n in range(40):
        outcomes.append(run_turn(rt=rt, session_id=sid, turn_no=n, model=model).value)
        if outcomes[-1] != "committed":
            break
    return outcomes


def _ledger(rt: Runtime, run_id: int) -> dict[str, Any]:
    with rt.engine.connect() as conn:
        run = conn.execute(select(runs).where(runs.c.id == run_id)).one()
        billed = conn.execute(
            select(func.coalesce(func.sum(usage.c.cost_usd), 0.0)).where(usage.c.run_id == run_id)
        ).scalar_one()
        held = conn.execute(
            select(reservations.c.state, reservations.c.amount_usd).where(
                reservations.c.run_id == run_id
            )
        ).all()
    return {
        "spent": run.spent_usd,
        "reserved": run.reserved_usd,
        "billed": float(billed),
        "held": [tuple(h) for h in held],
        "stop_reason": run.stop_reason,
    }


def _first_worst_case(rt: Runtime) -> float:
    """The worst case of a session's first call, as the loop reserves it."""
    _, (sid,) = make_run(rt.engine, max_output_tokens=MAX_OUTPUT_TOKENS)
    model = ScriptedModel(_turns(1))
    assert run_turn(rt=rt, session_id=sid, turn_no=0, model=model).value == "committed"
    return worst_case_usd(rt.prices, model.requests[0], max_output_tokens=MAX_OUTPUT_TOKENS)


def test_a_call_that_does_not_fit_is_not_sent_and_the_session_ends_stopped_budget(
    runtime: Runtime,
) -> None:
    # Given a run whose budget is just below its first call's worst case
    budget = _first_worst_case(runtime) * 0.99
    run_id, (sid,) = make_run(
        runtime.engine, budget_usd=budget, max_output_tokens=MAX_OUTPUT_TOKENS
    )
    model = ScriptedModel(_turns(5))
    # When its first turn runs
    outcome = run_turn(rt=runtime, session_id=sid, turn_no=0, model=model)
    # Then the model was never called, the session stopped on the budget, and nothing is
    # held or spent
    assert outcome.value == "ended"
    assert model.requests == []
    with runtime.engine.connect() as conn:
        row = conn.execute(select(sessions).where(sessions.c.id == sid)).one()
    assert (row.status, row.outcome) == ("stopped", "budget")
    ledger = _ledger(runtime, run_id)
    assert (ledger["spent"], ledger["reserved"], ledger["held"]) == (0.0, 0.0, [])
    assert ledger["stop_reason"].startswith("budget: spent $0.0000")
    assert "does not fit" in ledger["stop_reason"]


def test_spend_stays_within_the_budget_and_matches_the_usage_rows(runtime: Runtime) -> None:
    # Given a run whose budget holds a few calls at worst
    budget = _first_worst_case(runtime) * 3
    run_id, (sid,) = make_run(
        runtime.engine, budget_usd=budget, max_output_tokens=MAX_OUTPUT_TOKENS
    )
    model = ScriptedModel(_turns(40))
    # When its session works until it is stopped
    outcomes = _run_until_it_ends(runtime, sid, model)
    # Then every call sent was committed and paid, the refused one was never sent, the
    # spending on the run's row is its usage rows' sum, and it stayed within the budget
    committed = outcomes.count("committed")
    assert outcomes[-1] == "ended" and committed >= 3
    assert len(model.requests) == committed
    ledger = _ledger(runtime, run_id)
    assert ledger["spent"] == pytest.approx(ledger["billed"])
    assert ledger["spent"] <= budget
    assert ledger["reserved"] == pytest.approx(0.0) and ledger["held"] == []
    # and every committed turn's reservation is in the timing ledger
    with runtime.engine.connect() as conn:
        timed = conn.execute(
            select(turn_timings.c.reserve_ms, turn_timings.c.reserve_cpu_ms).where(
                turn_timings.c.session_id == sid
            )
        ).all()
    assert len(timed) == committed
    assert all(ms is not None and cpu is not None and cpu >= 0 for ms, cpu in timed)


def test_a_run_without_a_budget_reserves_nothing(runtime: Runtime) -> None:
    # Given a run with no budget
    run_id, (sid,) = make_run(runtime.engine)
    # When a turn commits
    assert run_turn(rt=runtime, session_id=sid, turn_no=0, model=ScriptedModel(_turns(1)))
    # Then the run keeps no ledger and the turn took no reservation
    ledger = _ledger(runtime, run_id)
    assert (ledger["spent"], ledger["reserved"], ledger["held"]) == (None, None, [])
    with runtime.engine.connect() as conn:
        reserve_ms = conn.execute(select(turn_timings.c.reserve_ms)).scalar_one()
    assert reserve_ms is None


@pytest.mark.parametrize(("maybe_billed", "kept"), [(False, False), (True, True)])
def test_a_failed_call_gives_its_hold_back_unless_it_may_have_been_billed(
    runtime: Runtime, maybe_billed: bool, kept: bool
) -> None:
    # Given a budgeted run whose first call fails: unbilled, or timed out after sending
    run_id, (sid,) = make_run(runtime.engine, budget_usd=1.0, max_output_tokens=MAX_OUTPUT_TOKENS)
    failures = [ModelUnavailable("gone", maybe_billed=maybe_billed)]

    def fail(_: ModelRequest) -> None:
        if failures:
            raise failures.pop()

    model = ScriptedModel(_turns(2), before=fail)
    # When the turn runs, and runs again after its retry delay
    with pytest.raises(TransientError):
        run_turn(rt=runtime, session_id=sid, turn_no=0, model=model)
    after_failure = _ledger(runtime, run_id)
    with runtime.engine.begin() as conn:
        conn.execute(
            sessions.update().where(sessions.c.id == sid).values(dispatched_at=runtime.clock())
        )
    assert run_turn(rt=runtime, session_id=sid, turn_no=0, model=model).value == "committed"
    # Then the failed call's hold went back, or stayed as unknown, and the retried call
    # was settled
    after_retry = _ledger(runtime, run_id)
    if kept:
        assert [s for s, _ in after_failure["held"]] == ["unknown"]
        assert after_retry["held"] == after_failure["held"]
        assert after_retry["reserved"] == pytest.approx(after_failure["held"][0][1])
    else:
        assert after_failure["held"] == [] and after_failure["reserved"] == pytest.approx(0)
        assert after_retry["held"] == [] and after_retry["reserved"] == pytest.approx(0)
    assert after_retry["billed"] > 0
    assert after_retry["spent"] == pytest.approx(after_retry["billed"])


def test_a_second_call_of_a_turn_is_reserved_before_it_is_sent(runtime: Runtime) -> None:
    # Given a budgeted run and a provider that asks the model a second time in one turn
    run_id, (sid,) = make_run(runtime.engine, budget_usd=1.0, max_output_tokens=MAX_OUTPUT_TOKENS)
    seen: list[tuple[bool, float]] = []

    def resend(request: ModelRequest) -> None:
        first = _ledger(runtime, run_id)["reserved"]
        assert request.may_resend is not None
        seen.append((request.may_resend(), first))
        seen.append((True, _ledger(runtime, run_id)["reserved"]))

    # When the turn runs
    model = ScriptedModel(_turns(1), before=resend)
    assert run_turn(rt=runtime, session_id=sid, turn_no=0, model=model).value == "committed"
    # Then the second call was allowed and doubled the hold, which the commit settled
    (allowed, once), (_, twice) = seen
    assert allowed and twice == pytest.approx(2 * once)
    ledger = _ledger(runtime, run_id)
    assert ledger["reserved"] == pytest.approx(0.0) and ledger["held"] == []


@pytest.mark.parametrize("case", ["settles", "kept", "not started"])
def test_a_session_under_way_kept_out_by_calls_in_flight_waits_for_them(
    runtime: Runtime, case: str
) -> None:
    # Given a budgeted run of two sessions, the second under way (its first turn paid) unless
    # it has not started, and the first with a call out that holds the rest of the budget:
    # one that will settle, or one of unknown outcome kept until the run ends
    worst = _first_worst_case(runtime)
    run_id, (first, second) = make_run(
        runtime.engine, waves="1x2", budget_usd=worst * 3, max_output_tokens=MAX_OUTPUT_TOKENS
    )
    model = ScriptedModel(_turns(3))
    turn = 0
    if case != "not started":
        assert run_turn(rt=runtime, session_id=second, turn_no=0, model=model).value == "committed"
        turn = 1
    left = _ledger(runtime, run_id)
    with runtime.engine.connect() as conn:
        held = reservations_store.reserve(
            conn,
            run_id=run_id,
            session_id=first,
            turn_no=0,
            epoch=1,
            amount_usd=worst * 3 - left["spent"] - worst * 0.1,
            now=runtime.clock(),
        )
    assert held.fits
    if case == "kept":
        with runtime.engine.begin() as conn:
            reservations_store.keep(conn, session_id=first, turn_no=0, epoch=1)
    sent = len(model.requests)
    # When the second session's next turn runs
    if case == "settles":
        with pytest.raises(TransientError):
            run_turn(rt=runtime, session_id=second, turn_no=turn, model=model)
    else:
        outcome = run_turn(rt=runtime, session_id=second, turn_no=turn, model=model)
    # Then its call was not sent
    assert len(model.requests) == sent
    with runtime.engine.connect() as conn:
        row = conn.execute(select(sessions).where(sessions.c.id == second)).one()
    if case != "settles":
        # and a hold that never settles, or a session yet to start, leaves it no call: the
        # session stopped on the budget
        assert outcome.value == "ended" and (row.status, row.outcome) == ("stopped", "budget")
        return
    # and the session waits, its turn handed back for later, no retry used
    assert row.status == "running" and row.outcome is None and row.model_retries == 0
    assert row.dispatched_at > runtime.clock()
    # When the call in flight settles, and the waiting turn runs again
    with runtime.engine.begin() as conn:
        reservations_store.release(conn, session_id=first, turn_no=0, epoch=1)
        conn.execute(
            sessions.update().where(sessions.c.id == second).values(dispatched_at=runtime.clock())
        )
    # Then its call fits, is sent and is settled
    assert run_turn(rt=runtime, session_id=second, turn_no=turn, model=model).value == "committed"
    assert len(model.requests) == sent + 1
    ledger = _ledger(runtime, run_id)
    assert ledger["held"] == [] and ledger["spent"] == pytest.approx(ledger["billed"])
