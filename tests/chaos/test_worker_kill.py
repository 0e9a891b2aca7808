"""Scenario 1: the session worker is SIGKILLed again and again in the middle of turns."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest
from sqlalchemy import Engine, and_, func, or_, select

from scheduler.cli.follow import until_finished
from tests.chaos.checker import check_run
from tests.chaos.conftest import FAST_RECOVERY_ENV, RUN_TIMEOUT_S
from tests.chaos.progress import turns_committed
from tests.conftest import WorkerProcess
from worker.fleet.identity import process_owner
from worker.settings import Settings
from worker.store.claims import lease_free
from worker.store.tables import sessions

pytestmark = [pytest.mark.chaos, pytest.mark.services, pytest.mark.slow]

#: How many times the worker is killed during the run.
KILLS = 5
#: Turns that must commit on a fresh worker before it may be killed again.
TURNS_BETWEEN_KILLS = 3
#: Longest wait for a moment with turns in flight and no killed turn still pending.
KILL_WINDOW_TIMEOUT_S = 60.0


def _wait_for_kill_window(engine: Engine, run_id: int, owner: str, turns_before: int) -> int:
    """Wait until ``owner`` has turns in flight and every earlier killed turn committed.

    Returns how many turns are in flight then. A killed turn is claimed again (its
    ``turn_attempts`` reaches 2) and must commit before the next kill, so no turn is killed
    twice and no session ends as a poison turn: the scenario is about recovery, not about
    the poison-turn guard (tests/worker/test_turn.py covers that).
    """
    s = sessions
    claimed = s.c.turn_attempts >= 1
    live = and_(claimed, s.c.lease_owner == owner, ~lease_free(func.now()))
    pending = or_(s.c.turn_attempts >= 2, and_(claimed, ~live))
    deadline = time.monotonic() + KILL_WINDOW_TIMEOUT_S
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            mine, stuck = conn.execute(
                select(func.count().filter(live), func.count().filter(pending)).where(
                    s.c.run_id == run_id, s.c.status == "running"
                )
            ).one()
        if (
            mine >= 1
            and stuck == 0
            and turns_committed(engine, run_id) >= turns_before + TURNS_BETWEEN_KILLS
        ):
            return int(mine)
        time.sleep(0.05)
    raise TimeoutError("no moment with turns in flight and none pending came")


def test_sigkilled_worker_loses_and_duplicates_nothing(
    settings: Settings,
    engine: Engine,
    enqueue: Callable[..., int],
    start_worker: Callable[..., WorkerProcess],
    chaos_report: Callable[..., None],
) -> None:
    # Given a 5x10 run on one worker, with model calls slow enough to be caught in flight
    worker = start_worker(concurrency=10, **FAST_RECOVERY_ENV)
    workers = [worker]
    run_id = enqueue(
        settings.database_url, settings.broker_url, "--wave", "5x10", "--sim-latency-ms", "300"
    )
    pids: list[int] = []
    exit_codes: list[int | None] = []
    in_flight: list[int] = []
    # When the worker is SIGKILLed mid-turn five times, and a new one started each time
    for _ in range(KILLS):
        assert worker.proc is not None
        pid = worker.proc.pid
        in_flight.append(
            _wait_for_kill_window(
                engine, run_id, process_owner(pid), turns_committed(engine, run_id)
            )
        )
        exit_codes.append(worker.stop(signal.SIGKILL))
        pids.append(pid)
        worker = start_worker(concurrency=10, **FAST_RECOVERY_ENV)
        workers.append(worker)
    assert worker.proc is not None
    pids.append(worker.proc.pid)
    until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
    # Then every session ended (all 50 verified), and nothing was lost or written twice
    figures = check_run(engine, run_id)
    redispatched = sum("reconciler re-dispatching" in line for w in workers for line in w.log)
    chaos_report(
        figures,
        sigkills=len(exit_codes),
        exit_codes=exit_codes,
        turns_in_flight_at_kills=in_flight,
        worker_pids=pids,
        reconciler_redispatch_passes=redispatched,
    )
    assert exit_codes == [-signal.SIGKILL] * KILLS
    assert len(set(pids)) == KILLS + 1 and all(n >= 1 for n in in_flight)
    assert redispatched >= KILLS
    assert figures.clean, figures
    assert figures.status_count("succeeded") == 50
    assert worker.alive and worker.errors() == []
