"""Heartbeated leases: what a renewal extends, and what it never waits for."""

from __future__ import annotations

import subprocess
import sys
import threading
from datetime import datetime
from pathlib import Path

import pytest
from sqlalchemy import Engine, select, update

from tests.conftest import ROOT
from tests.factories import make_run
from worker.fleet.runtime import Runtime
from worker.store.claims import Claim, lease_turn
from worker.store.engine import utcnow
from worker.store.tables import sessions

pytestmark = pytest.mark.services

#: Generous bound on a renewal that must not wait for a lock (it takes milliseconds).
RENEW_JOIN_S = 20


def _claim(engine: Engine, session_id: int, owner: str) -> Claim:
    with engine.begin() as conn:
        claim = lease_turn(
            conn, session_id=session_id, turn_no=0, owner=owner, now=utcnow(), ttl_s=5.0
        )
    assert claim is not None
    return claim


def _expiry(engine: Engine, session_id: int) -> datetime:
    with engine.connect() as conn:
        expires_at: datetime = conn.execute(
            select(sessions.c.lease_expires_at).where(sessions.c.id == session_id)
        ).scalar_one()
    return expires_at


def test_a_renewal_extends_only_the_leases_this_process_still_holds(
    engine: Engine, runtime: Runtime
) -> None:
    # Given three leases taken by this process, and a fourth session leased by another
    _, (mine, superseded, other_owner, foreign) = make_run(engine, waves="1x4")
    claims = {sid: _claim(engine, sid, runtime.owner) for sid in (mine, superseded, other_owner)}
    _claim(engine, foreign, "elsewhere:1")
    # And one of them was taken over since (its epoch moved on), another passed to a new owner
    with engine.begin() as conn:
        conn.execute(
            update(sessions)
            .where(sessions.c.id == superseded)
            .values(lease_epoch=sessions.c.lease_epoch + 1)
        )
        conn.execute(
            update(sessions).where(sessions.c.id == other_owner).values(lease_owner="elsewhere:2")
        )
    before = {sid: _expiry(engine, sid) for sid in (mine, superseded, other_owner, foreign)}
    # When the process renews what it holds
    with (
        runtime.leases.hold(mine, claims[mine].epoch),
        runtime.leases.hold(superseded, claims[superseded].epoch),
        runtime.leases.hold(other_owner, claims[other_owner].epoch),
    ):
        renewed = runtime.leases.renew()
    # Then only the lease it still holds under the same epoch was extended
    assert renewed == 1
    assert _expiry(engine, mine) > before[mine]
    for sid in (superseded, other_owner, foreign):
        assert _expiry(engine, sid) == before[sid]


def test_a_renewal_skips_a_session_row_another_transaction_holds(
    engine: Engine, runtime: Runtime
) -> None:
    # Given two leases of this process, one of whose session rows a commit holds locked
    _, (locked, free) = make_run(engine, waves="1x2")
    claims = {sid: _claim(engine, sid, runtime.owner) for sid in (locked, free)}
    before = {sid: _expiry(engine, sid) for sid in (locked, free)}
    result: list[int] = []
    with engine.connect() as holder, holder.begin():
        holder.execute(select(sessions.c.id).where(sessions.c.id == locked).with_for_update())
        # When the process renews its leases while that transaction is open
        with (
            runtime.leases.hold(locked, claims[locked].epoch),
            runtime.leases.hold(free, claims[free].epoch),
        ):
            renewal = threading.Thread(target=lambda: result.append(runtime.leases.renew()))
            renewal.start()
            renewal.join(RENEW_JOIN_S)
            finished = not renewal.is_alive()
    renewal.join()
    # Then the renewal did not wait for the lock: it extended the free lease and skipped
    # the locked one, whose holder lets it go when it commits
    assert finished, "the renewal waited for a row another transaction holds"
    assert result == [1]
    assert _expiry(engine, free) > before[free]
    assert _expiry(engine, locked) == before[locked]


def test_a_green_worker_renews_its_leases_while_its_greenlets_keep_the_loop_busy(
    engine: Engine,
) -> None:
    # Given a process patched by gevent, as a worker on a green pool, holding a lease
    _, (sid,) = make_run(engine)
    url = engine.url.render_as_string(hide_password=False)
    # When one of its greenlets keeps the loop busy for 1.5 s without yielding
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("green_leases.py")), url, str(sid)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    ran, rows = (int(n) for n in done.stdout.split())
    # Then the renewals (every 0.1 s) still ran in that time, each renewing the lease
    assert ran >= 5 and rows == ran, done.stdout
