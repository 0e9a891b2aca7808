"""Scenarios 16 and 17: a fleet of three hosts verifying pages in Chromium loses a worker
while its sessions are verifying, or has its browser killed mid-verification.

The bed and the run are :mod:`tests.chaos.bed_runs`' (three network namespaces, default
settings, a 5x10 run), judged in Chromium. The fault strikes once the first host holds a
session that is being verified. A verification whose worker died is taken over by another
host and goes ahead of the verifications queued; one whose browser died is tried again
by its own worker on a new browser.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import Engine, select

from tests.chaos.bed_runs import (
    Baselines,
    Outcome,
    assert_healed,
    make_bed,
    report_fault,
    run_on_bed,
    under_way,
)
from tests.chaos.checker import check_run
from tests.chaos.hosts import Host, TestBed
from tests.chaos.progress import wait_until
from worker.settings import Settings
from worker.states import SessionStatus
from worker.store.tables import sessions

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.services,
    pytest.mark.slow,
    pytest.mark.browser,
    pytest.mark.timeout(1800),
]

#: Seconds a run judged in Chromium may take: every page is rendered.
BROWSER_RUN_TIMEOUT_S = 600.0
#: Longest wait for a host verifying a page to have its browser running.
BROWSER_UP_S = 60.0

_BASELINES = Baselines()


@pytest.fixture(scope="module")
def bed(pg_url: str, redis_url: str) -> Iterator[TestBed]:
    """Three hosts on a bridge, reaching the test PostgreSQL and Redis through it."""
    yield from make_bed(pg_url, redis_url)


def _verifying(engine: Engine, run_id: int, owner: str) -> list[int]:
    """The run's sessions ``owner`` holds while they are verified."""
    with engine.connect() as conn:
        return list(
            conn.execute(
                select(sessions.c.id).where(
                    sessions.c.run_id == run_id,
                    sessions.c.lease_owner == owner,
                    sessions.c.status == SessionStatus.verifying.value,
                )
            ).scalars()
        )


def _verifying_under_way(engine: Engine, run_id: int, owner: str) -> bool:
    return under_way(engine, run_id, owner) and bool(_verifying(engine, run_id, owner))


def _run(
    bed: TestBed,
    settings: Settings,
    engine: Engine,
    enqueue: Callable[..., int],
    fault: Callable[[Host], None],
) -> tuple[Outcome, float]:
    base_s = _BASELINES.get(
        bed, settings, engine, enqueue, verifier="browser", timeout_s=BROWSER_RUN_TIMEOUT_S
    )
    outcome = run_on_bed(
        bed,
        settings,
        engine,
        enqueue,
        fault=fault,
        verifier="browser",
        ready=_verifying_under_way,
        timeout_s=BROWSER_RUN_TIMEOUT_S,
    )
    return outcome, base_s


def test_a_worker_killed_while_verifying_is_taken_over_at_once(
    bed: TestBed,
    settings: Settings,
    engine: Engine,
    enqueue: Callable[..., int],
    chaos_report: Callable[..., None],
) -> None:
    # Given a 5x10 run judged in Chromium over three hosts, with default settings
    killed: list[int] = []
    # When the first host's worker is SIGKILLed while it verifies a session's page
    outcome, base_s = _run(bed, settings, engine, enqueue, lambda h: killed.append(h.kill_worker()))
    # Then another host took the verification over within seconds, nothing lost or doubled
    figures = check_run(engine, outcome.run_id)
    recovery = report_fault(chaos_report, figures, outcome, base_s, worker_killed=killed)
    assert_healed(figures, outcome, recovery, base_s)
    assert killed


def test_a_browser_killed_mid_verification_is_replaced(
    bed: TestBed,
    settings: Settings,
    engine: Engine,
    enqueue: Callable[..., int],
    chaos_report: Callable[..., None],
) -> None:
    # Given a 5x10 run judged in Chromium over three hosts, with default settings
    killed: list[int] = []

    def kill_browser(host: Host) -> None:
        # A verification under way may still be launching its browser.
        wait_until("the host's browser", lambda: bool(host.browser_pids()), BROWSER_UP_S)
        killed.append(host.kill_browsers())

    # When every Chromium process of the first host is SIGKILLed while it verifies a page
    outcome, base_s = _run(bed, settings, engine, enqueue, kill_browser)
    # Then its worker judged the page again on a new browser, nothing lost or doubled
    figures = check_run(engine, outcome.run_id)
    recovery = report_fault(chaos_report, figures, outcome, base_s, browser_processes=killed)
    assert_healed(figures, outcome, recovery, base_s)
    assert killed and killed[0] >= 1
    # and its worker lived on, and saw its browser gone
    assert outcome.survived
    seen = ("browser unavailable", "Chromium is gone")
    assert any(m in line for line in outcome.logs[0] for m in seen), outcome.logs[0][-20:]
