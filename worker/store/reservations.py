"""Reservations: a model call's worst-case cost, held against its run's budget until billed.

A run with a budget keeps two figures on its row: ``spent_usd``, the dollars of its usage
rows, and ``reserved_usd``, what its calls in flight may still cost. Before a call is sent,
:func:`reserve` adds the call's worst case to ``reserved_usd`` with one guarded UPDATE that
changes no row when ``spent + reserved + the call`` would pass the budget: the row lock
makes it atomic across the fleet, so the calls in flight can never together cost more than
what is left. The turn's commit settles the hold: it drops its reservation row and moves the
billed cost from reserved to spent in the commit's own statement
(:mod:`worker.store.turns`), so a turn fenced off settles nothing.

Each hold is a row keyed by the turn's lease ``(session, turn_no, lease_epoch)``:

- a call that failed without being billed is released (:func:`release`);
- one that may have been billed with no usage reported is kept (:func:`keep`) until the
  run ends (:func:`release_run`);
- a worker that died with a hold leaves its turn unsettled; whoever takes the lease over
  releases it before reserving its own (``stale=True``), and the dead worker's commit, if
  it ever comes, is fenced: nothing is counted twice.

Runs without a budget have neither figure and never come here.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from sqlalchemy import (
    BigInteger,
    Float,
    Integer,
    bindparam,
    delete,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from worker.store.tables import reservations, runs

__all__ = [
    "Hold",
    "HoldState",
    "add_spent",
    "has_room",
    "keep",
    "release",
    "release_run",
    "release_session",
    "reserve",
    "settle",
]


class HoldState(str, Enum):
    """Where a reservation stands."""

    #: the call is out; its turn settles or releases it
    held = "held"
    #: the call may have been billed with no usage reported; kept until the run ends
    unknown = "unknown"


@dataclass(frozen=True)
class Hold:
    """The answer to a reservation, with the run's figures after it."""

    fits: bool
    """The call's cost was reserved; when False, nothing was."""
    budget_usd: float
    spent_usd: float
    reserved_usd: float
    """Every hold of the run, this one included when it fits."""
    kept_usd: float = 0.0
    """Of ``reserved_usd``, what calls of unknown outcome keep until the run ends (read
    only when the call does not fit)."""

    asked_usd: float = 0.0
    """The call's own worst case (read only when it does not fit)."""

    @property
    def settles_to_fit(self) -> bool:
        """A refused call would fit once every call in flight settled at no cost: what
        blocks it are holds that will be settled or released, not what was spent."""
        return not self.fits and self.spent_usd + self.kept_usd + self.asked_usd <= self.budget_usd

    @property
    def left_usd(self) -> float:
        """What the budget leaves for calls not yet reserved."""
        return self.budget_usd - self.spent_usd - self.reserved_usd


_AMOUNT = bindparam("b_amount", type_=Float)
_RUN_ID = bindparam("b_run_id", type_=BigInteger)
#: The guard: the call's cost goes on the run only if the run can still pay all it holds.
_HOLD_ON_RUN = (
    update(runs)
    .where(
        runs.c.id == _RUN_ID,
        runs.c.spent_usd + runs.c.reserved_usd + _AMOUNT <= runs.c.budget_usd,
    )
    .values(reserved_usd=runs.c.reserved_usd + _AMOUNT)
    .returning(runs.c.budget_usd, runs.c.spent_usd, runs.c.reserved_usd)
)
_HELD = _HOLD_ON_RUN.cte("held")
#: PostgreSQL: the guard and the reservation row in one statement, one round trip.
_RESERVE_PG = select(_HELD.c.budget_usd, _HELD.c.spent_usd, _HELD.c.reserved_usd).add_cte(
    insert(reservations)
    .from_select(
        ["run_id", "session_id", "turn_no", "lease_epoch", "amount_usd", "state", "created_at"],
        select(
            _RUN_ID,
            bindparam("b_session_id", type_=BigInteger),
            bindparam("b_turn_no", type_=Integer),
            bindparam("b_epoch", type_=Integer),
            _AMOUNT,
            bindparam("b_state", type_=reservations.c.state.type),
            bindparam("b_now", type_=reservations.c.created_at.type),
        ).select_from(_HELD),
    )
    .cte("reserved")
)
_ADD_HOLD = insert(reservations)
_GROW_HOLD = (
    update(reservations)
    .where(
        reservations.c.session_id == bindparam("b_session_id"),
        reservations.c.turn_no == bindparam("b_turn_no"),
        reservations.c.lease_epoch == bindparam("b_epoch"),
        reservations.c.state == HoldState.held.value,
    )
    .values(amount_usd=reservations.c.amount_usd + _AMOUNT)
)
_FIGURES = select(runs.c.budget_usd, runs.c.spent_usd, runs.c.reserved_usd).where(
    runs.c.id == _RUN_ID
)
_KEPT = select(func.coalesce(func.sum(reservations.c.amount_usd), 0.0)).where(
    reservations.c.run_id == _RUN_ID, reservations.c.state == HoldState.unknown.value
)


def reserve(
    conn: Connection,
    *,
    run_id: int,
    session_id: int,
    turn_no: int,
    epoch: int,
    amount_usd: float,
    now: datetime,
    again: bool = False,
    stale: bool = False,
) -> Hold:
    """Hold ``amount_usd`` of the run's budget for a call of turn ``turn_no`` under ``epoch``.

    Args:
        conn: A connection outside any transaction; the reservation is committed on return.
        run_id: The session's run, which has a budget.
        session_id: The session.
        turn_no: The turn making the call.
        epoch: The turn's lease epoch.
        amount_usd: The call's worst-case cost.
        now: The time of the reservation.
        again: The turn holds a reservation already (a second call of the same turn): it
            grows by ``amount_usd``.
        stale: Earlier claims of the turn neither committed nor handed the lease back (a
            worker died): their holds are released first.

    Returns:
        Whether it fits, and the run's figures.
    """
    params = {
        "b_run_id": run_id,
        "b_session_id": session_id,
        "b_turn_no": turn_no,
        "b_epoch": epoch,
        "b_amount": amount_usd,
        "b_state": HoldState.held.value,
        "b_now": now,
    }
    if not stale and not again and conn.dialect.name == "postgresql":
        # The common case: one statement, atomic on its own.
        with conn.execution_options(isolation_level="AUTOCOMMIT").begin():
            row = conn.execute(_RESERVE_PG, params).first()
            if row is not None:
                return Hold(True, row.budget_usd, row.spent_usd, row.reserved_usd)
            return _refused(conn, run_id, amount_usd)
    with conn.begin():
        if stale:
            _free(
                conn,
                reservations.c.session_id == session_id,
                reservations.c.lease_epoch < epoch,
                reservations.c.state == HoldState.held.value,
            )
        row = conn.execute(_HOLD_ON_RUN, params).first()
        if row is None:
            return _refused(conn, run_id, amount_usd)
        if again:
            conn.execute(_GROW_HOLD, params)
        else:
            conn.execute(
                _ADD_HOLD,
                {
                    "run_id": run_id,
                    "session_id": session_id,
                    "turn_no": turn_no,
                    "lease_epoch": epoch,
                    "amount_usd": amount_usd,
                    "state": HoldState.held.value,
                    "created_at": now,
                },
            )
        return Hold(True, row.budget_usd, row.spent_usd, row.reserved_usd)


def _refused(conn: Connection, run_id: int, amount_usd: float) -> Hold:
    row = conn.execute(_FIGURES, {"b_run_id": run_id}).one()
    kept = conn.execute(_KEPT, {"b_run_id": run_id}).scalar_one()
    return Hold(
        False, row.budget_usd, row.spent_usd, row.reserved_usd, float(kept), asked_usd=amount_usd
    )


def settle(
    conn: Connection, *, run_id: int, session_id: int, turn_no: int, epoch: int, cost_usd: float
) -> None:
    """Settle a committed turn's call: its hold released, its billed cost spent.

    In the commit's transaction; PostgreSQL does this inside the commit's statement instead
    (:mod:`worker.store.turns`).
    """
    held = _free(
        conn,
        reservations.c.session_id == session_id,
        reservations.c.turn_no == turn_no,
        reservations.c.lease_epoch == epoch,
        reservations.c.state == HoldState.held.value,
        apply=False,
    )
    conn.execute(
        update(runs)
        .where(runs.c.id == run_id)
        .values(
            spent_usd=runs.c.spent_usd + cost_usd,
            reserved_usd=runs.c.reserved_usd - held.get(run_id, 0.0),
        )
    )


def has_room(conn: Connection, *, run_id: int, amount_usd: float) -> bool:
    """Whether the run can pay ``amount_usd`` more on top of what it spent and holds, by
    the rule :func:`reserve` guards with; a run without a budget always can.

    The caller holds the run's row lock when what it then spends must not race a
    reservation.
    """
    row = conn.execute(_FIGURES, {"b_run_id": run_id}).one()
    if row.budget_usd is None or row.spent_usd is None:
        return True
    return bool(row.spent_usd + (row.reserved_usd or 0.0) + amount_usd <= row.budget_usd)


def add_spent(conn: Connection, *, run_id: int, cost_usd: float) -> None:
    """Count billed dollars recorded outside a turn's commit (a refusal the provider bills)."""
    conn.execute(
        update(runs)
        .where(runs.c.id == run_id, runs.c.spent_usd.is_not(None))
        .values(spent_usd=runs.c.spent_usd + cost_usd)
    )


def release(conn: Connection, *, session_id: int, turn_no: int, epoch: int) -> None:
    """Release the hold of a call that failed without being billed."""
    _free(
        conn,
        reservations.c.session_id == session_id,
        reservations.c.turn_no == turn_no,
        reservations.c.lease_epoch == epoch,
        reservations.c.state == HoldState.held.value,
    )


def keep(conn: Connection, *, session_id: int, turn_no: int, epoch: int) -> None:
    """Keep the hold of a call that may have been billed, with no usage to settle it by.

    It stays on the run, whoever takes the turn over, until the run ends.
    """
    conn.execute(
        update(reservations)
        .where(
            reservations.c.session_id == session_id,
            reservations.c.turn_no == turn_no,
            reservations.c.lease_epoch == epoch,
            reservations.c.state == HoldState.held.value,
        )
        .values(state=HoldState.unknown.value)
    )


def release_session(conn: Connection, *, session_id: int) -> None:
    """Release the calls a session holds as it ends (a dead worker's, say); a call of
    unknown outcome stays until its run ends."""
    _free(
        conn,
        reservations.c.session_id == session_id,
        reservations.c.state == HoldState.held.value,
    )


def release_run(conn: Connection, *, run_id: int) -> None:
    """Release everything a run holds: it has ended, and no call of it is out."""
    _free(conn, reservations.c.run_id == run_id)


def _free(
    conn: Connection, *conditions: ColumnElement[bool], apply: bool = True
) -> dict[int, float]:
    """Delete the holds ``conditions`` pick; returns their dollars by run, taken off each
    run's ``reserved_usd`` unless ``apply`` is false."""
    rows = conn.execute(
        delete(reservations)
        .where(*conditions)
        .returning(reservations.c.run_id, reservations.c.amount_usd)
    ).all()
    freed: dict[int, float] = defaultdict(float)
    for run_id, amount in rows:
        freed[int(run_id)] += float(amount)
    if apply:
        for run_id, amount in freed.items():
            conn.execute(
                update(runs)
                .where(runs.c.id == run_id)
                .values(reserved_usd=runs.c.reserved_usd - amount)
            )
    return dict(freed)
