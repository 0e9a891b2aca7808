"""Heartbeated leases: what a renewal keeps alive, and what it never waits for."""

from __future__ import annotations

import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select, update

from tests.conftest import ROOT
from tests.factories import make_run
from worker.fleet.runtime import Runtime
from worker.store import due
from worker.store.claims import Claim, claim_verification, lease_turn
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


def _expire(engine: Engine, *session_ids: int) -> None:
    """Move the leases' own expiry into the past, as a long model call outlives it."""
    with engine.begin() as conn:
        conn.execute(
            update(sessions)
            .where(sessions.c.id.in_(session_ids))
            .values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )


def _lapsed(engine: Engine, *, later_s: float = 0.0) -> set[int]:
    """The sessions a reconciler takes over, ``later_s`` from now."""
    with engine.begin() as conn:
        taken = due.claim_lapsed(conn, now=utcnow() + timedelta(seconds=later_s))
    return {d.session_id for d in taken}


def _lease_rows(engine: Engine, *session_ids: int) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        rows = conn.execute(
            select(sessions.c.id, sessions.c.lease_owner, sessions.c.lease_expires_at).where(
                sessions.c.id.in_(session_ids)
            )
        ).all()
    return sorted(tuple(row) for row in rows)


def test_a_renewal_keeps_alive_the_leases_this_process_holds_and_no_other(
    engine: Engine, runtime: Runtime
) -> None:
    # Given four sessions whose leases' own expiry has passed: a turn and a verification
    # this process holds, a turn it held and let go of without a commit, and a turn another
    # process took
    _, (mine, judged, dropped, foreign) = make_run(engine, waves="1x4")
    claims = {sid: _claim(engine, sid, runtime.owner) for sid in (mine, dropped)}
    _claim(engine, foreign, "elsewhere:1")
    with engine.begin() as conn:
        conn.execute(update(sessions).where(sessions.c.id == judged).values(status="verifying"))
        verifying = claim_verification(
            conn, session_id=judged, round_no=0, owner=runtime.owner, now=utcnow(), ttl_s=5.0
        )
    assert verifying is not None
    _expire(engine, mine, judged, dropped, foreign)
    with runtime.leases.hold(dropped, claims[dropped].epoch):
        pass
    before = _lease_rows(engine, mine, judged)
    # When the process renews while it holds the first two
    with (
        runtime.leases.hold(mine, claims[mine].epoch),
        runtime.leases.hold(judged, verifying.epoch),
    ):
        held = runtime.leases.renew()
        # Then those two leases are held, and no session row was written for them
        assert held == 2
        assert _lease_rows(engine, mine, judged) == before
        # And the reconciler takes over the other two, the one let go of included
        assert _lapsed(engine) == {dropped, foreign}
        # And the two it holds lapse once the process stops renewing
        assert _lapsed(engine, later_s=runtime.settings.lease_ttl_s + 1) == {mine, judged}


def test_a_renewal_waits_for_no_session_row_another_transaction_holds(
    engine: Engine, runtime: Runtime
) -> None:
    # Given a turn of this process whose session row a commit holds locked
    _, (locked,) = make_run(engine)
    claim = _claim(engine, locked, runtime.owner)
    _expire(engine, locked)
    result: list[int] = []
    with runtime.leases.hold(locked, claim.epoch):
        with engine.connect() as holder, holder.begin():
            holder.execute(select(sessions.c.id).where(sessions.c.id == locked).with_for_update())
            # When the process renews its leases while that transaction is open
            renewal = threading.Thread(target=lambda: result.append(runtime.leases.renew()))
            renewal.start()
            renewal.join(RENEW_JOIN_S)
            finished = not renewal.is_alive()
        renewal.join()
        # Then the renewal did not wait for the lock, and kept the lease alive
        assert finished, "the renewal waited for a row another transaction holds"
        assert result == [1]
        assert _lapsed(engine) == set()


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
