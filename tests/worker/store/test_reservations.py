"""Reservations against a run's budget, on SQLite and PostgreSQL: the guard, settlement,
release, calls of unknown outcome, a dead worker's hold, and many workers at once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select

from tests.factories import make_run
from worker.agent.events import ModelOutput
from worker.agent.timings import TurnTimer
from worker.settings import Settings
from worker.store import reservations
from worker.store.claims import Claim, lease_turn
from worker.store.engine import make_engine, migrate, utcnow
from worker.store.reservations import Hold, HoldState
from worker.store.tables import reservations as holds
from worker.store.tables import runs, sessions
from worker.store.turns import TurnRows, commit_turn, holds_lease

pytestmark = pytest.mark.services

BUDGET_USD = 1.0


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """An engine on a migrated SQLite file, or on the test PostgreSQL database."""
    if request.param == "postgresql":
        yield request.getfixturevalue("engine")
        return
    url = f"sqlite:///{tmp_path / 'swarm.db'}"
    migrate(url)
    engine = make_engine(Settings(database_url=url))
    yield engine
    engine.dispose()


def _claim(engine: Engine, session_id: int, *, owner: str = "here:1") -> Claim:
    with engine.begin() as conn:
        claim = lease_turn(
            conn, session_id=session_id, turn_no=0, owner=owner, now=utcnow(), ttl_s=30
        )
    assert claim is not None
    return claim


def _reserve(engine: Engine, run_id: int, claim: Claim, usd: float, *, again: bool = False) -> Hold:
    with engine.connect() as conn:
        return reservations.reserve(
            conn,
            run_id=run_id,
            session_id=claim.session_id,
            turn_no=claim.turn_no,
            epoch=claim.epoch,
            amount_usd=usd,
            now=utcnow(),
            again=again,
            stale=claim.attempts > 1,
        )


def _ledger(engine: Engine, run_id: int) -> tuple[float, float, int]:
    """The run's spent and reserved dollars, and its reservation rows."""
    with engine.connect() as conn:
        spent, reserved = conn.execute(
            select(runs.c.spent_usd, runs.c.reserved_usd).where(runs.c.id == run_id)
        ).one()
        rows = conn.execute(
            select(func.count()).select_from(holds).where(holds.c.run_id == run_id)
        ).scalar_one()
    return float(spent), float(reserved), int(rows)


def _expect(engine: Engine, run_id: int, *, spent: float, reserved: float, rows: int) -> None:
    got_spent, got_reserved, got_rows = _ledger(engine, run_id)
    assert got_spent == pytest.approx(spent)
    assert got_reserved == pytest.approx(reserved)
    assert got_rows == rows


def _commit(engine: Engine, run_id: int, claim: Claim, cost_usd: float) -> bool:
    now = utcnow()
    rows = TurnRows(
        run_id=run_id,
        items=[ModelOutput({"role": "model", "parts": [{"text": "ok"}]}, "STOP")],
        first_seq=100,
        usage={
            "model": "sim",
            "prompt_tokens": 1000,
            "cached_tokens": 0,
            "output_tokens": 100,
            "thoughts_tokens": 0,
            "tool_use_tokens": 0,
            "cost_usd": cost_usd,
            "price_date": "2026-12-01",
            "latency_ms": 10,
        },
        timing=TurnTimer().row(claimed_at=now, dispatched_at=None, dispatch_ms=None),
        budgeted=True,
    )
    with engine.connect() as conn:
        tx = conn.begin()
        committed = holds_lease(conn, claim=claim) and commit_turn(
            conn, claim=claim, rows=rows, now=now, fenced_at=now
        )
        if committed:
            tx.commit()
        else:
            tx.rollback()
    return committed


def test_a_reservation_that_fits_is_held_and_one_that_does_not_is_refused(
    store: Engine,
) -> None:
    # Given a budgeted run with one session holding its turn's lease
    run_id, (sid,) = make_run(store, budget_usd=BUDGET_USD)
    claim = _claim(store, sid)
    # When it reserves 0.6, then 0.3 more for a second call, then 0.2 more
    first = _reserve(store, run_id, claim, 0.6)
    second = _reserve(store, run_id, claim, 0.3, again=True)
    third = _reserve(store, run_id, claim, 0.2, again=True)
    # Then the first two fit and the third would pass the budget, so nothing of it is held
    assert (first.fits, second.fits, third.fits) == (True, True, False)
    assert third.reserved_usd == pytest.approx(0.9)
    assert third.left_usd == pytest.approx(0.1)
    _expect(store, run_id, spent=0.0, reserved=0.9, rows=1)


def test_the_commit_settles_the_billed_cost_and_releases_the_hold(store: Engine) -> None:
    # Given a call of a budgeted run with 0.5 reserved
    run_id, (sid,) = make_run(store, budget_usd=BUDGET_USD)
    claim = _claim(store, sid)
    assert _reserve(store, run_id, claim, 0.5).fits
    # When its turn commits a billed cost of 0.02
    assert _commit(store, run_id, claim, 0.02)
    # Then the 0.02 is spent and nothing is held any more
    _expect(store, run_id, spent=0.02, reserved=0.0, rows=0)


def test_a_failed_call_releases_and_a_call_of_unknown_outcome_keeps_until_the_run_ends(
    store: Engine,
) -> None:
    # Given two sessions of a budgeted run, each with a call reserved
    run_id, (a, b) = make_run(store, waves="1x2", budget_usd=BUDGET_USD)
    claim_a, claim_b = _claim(store, a), _claim(store, b)
    assert _reserve(store, run_id, claim_a, 0.25).fits
    assert _reserve(store, run_id, claim_b, 0.25).fits
    # When A's call failed unbilled and B's timed out after it was sent
    with store.begin() as conn:
        reservations.release(conn, session_id=a, turn_no=0, epoch=claim_a.epoch)
        reservations.keep(conn, session_id=b, turn_no=0, epoch=claim_b.epoch)
        # ...and B's session ends (a takeover or an ending releases held calls only)
        reservations.release_session(conn, session_id=b)
    # Then A's hold is gone and B's stays, marked unknown
    _expect(store, run_id, spent=0.0, reserved=0.25, rows=1)
    with store.connect() as conn:
        assert conn.execute(select(holds.c.state)).scalar_one() == HoldState.unknown.value
    # When the run ends
    with store.begin() as conn:
        reservations.release_run(conn, run_id=run_id)
    # Then nothing is held
    _expect(store, run_id, spent=0.0, reserved=0.0, rows=0)


def test_a_dead_workers_hold_is_released_once_by_the_takeover_and_its_commit_fenced(
    store: Engine,
) -> None:
    # Given worker A reserved 0.4 for turn 0 and died with the call out
    run_id, (sid,) = make_run(store, budget_usd=BUDGET_USD)
    dead = _claim(store, sid, owner="dead:1")
    assert _reserve(store, run_id, dead, 0.4).fits
    with store.begin() as conn:
        conn.execute(
            sessions.update()
            .where(sessions.c.id == sid)
            .values(lease_expires_at=utcnow().replace(year=2000))
        )
    # When worker B takes the lease over and reserves 0.7 for the same turn
    alive = _claim(store, sid, owner="alive:1")
    assert alive.attempts == 2 and alive.epoch > dead.epoch
    hold = _reserve(store, run_id, alive, 0.7)
    # Then A's hold was released first, so B's fits, and only B's is held
    assert hold.fits
    _expect(store, run_id, spent=0.0, reserved=0.7, rows=1)
    # When B commits, and then A's late commit comes
    assert _commit(store, run_id, alive, 0.05)
    assert not _commit(store, run_id, dead, 0.05)
    # Then B's cost is spent once, A's is nowhere, and nothing is held
    _expect(store, run_id, spent=0.05, reserved=0.0, rows=0)


def test_concurrent_reservations_never_hold_more_than_the_budget(engine: Engine) -> None:
    # Given 40 sessions of a run with a $1 budget, each holding its turn's lease
    run_id, ids = make_run(engine, waves="1x40", budget_usd=BUDGET_USD)
    claims = [_claim(engine, sid) for sid in ids]
    barrier = threading.Barrier(len(claims))
    answers: list[Hold] = []
    lock = threading.Lock()

    def reserve(claim: Claim) -> None:
        barrier.wait()
        hold = _reserve(engine, run_id, claim, 0.07)
        with lock:
            answers.append(hold)

    # When they all reserve 0.07 at once
    threads = [threading.Thread(target=reserve, args=(c,)) for c in claims]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    # Then exactly as many fit as the budget holds (14 * 0.07 = 0.98), and the ledger agrees
    assert sum(1 for h in answers if h.fits) == 14
    _expect(engine, run_id, spent=0.0, reserved=0.98, rows=14)
