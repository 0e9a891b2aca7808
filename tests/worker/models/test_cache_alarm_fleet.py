"""The cache-share alarm end to end: the fake API stops serving its cache mid-run."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, select

from ops.fake_gemini import FakeGemini, Fault, FaultRule
from scheduler.cli import cli
from scheduler.cli.follow import until_finished
from tests.conftest import WorkerProcess
from tests.factories import enqueue
from worker.settings import Settings
from worker.store.tables import sessions, usage

pytestmark = [pytest.mark.services, pytest.mark.slow]

MODEL = "gemini-3-flash-preview"
#: Seconds any whole run in these tests may take.
RUN_TIMEOUT_S = 150
#: Requests the fake serves from its cache before it stops.
CACHED_REQUESTS = 30


def _cli(settings: Settings, *args: str) -> str:
    result = CliRunner().invoke(cli, ["--database-url", settings.database_url, *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_a_cache_that_stops_serving_mid_run_raises_the_alarm_at_that_turn(
    settings: Settings,
    engine: Engine,
    start_worker: Callable[..., WorkerProcess],
    fake_gemini: Callable[..., FakeGemini],
) -> None:
    # Given a fake API whose implicit cache stops serving after 30 requests, as when the
    # prefix stops being byte-identical or the model behind the name changes
    fake = fake_gemini(faults=[FaultRule(Fault.cache_cold, times=None, after=CACHED_REQUESTS)])
    worker = start_worker(SWARM_GEMINI_BASE_URL=fake.url, GEMINI_API_KEY="k")
    # When a 2x5 run goes through it
    run_id = enqueue(settings, "--wave", "2x5", model=MODEL, seed=3)
    figures = until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
    # Then the run's figures carry the alarm, starting at the first turn (after a
    # session's first) that the cache did not serve
    alarm = figures.cache_alarm
    assert alarm is not None, figures.tokens
    with engine.connect() as conn:
        first_cold = conn.execute(
            select(sessions.c.index, usage.c.turn_no)
            .join(sessions, sessions.c.id == usage.c.session_id)
            .where(usage.c.run_id == run_id, usage.c.turn_no > 0, usage.c.cached_tokens == 0)
            .order_by(usage.c.id)
            .limit(1)
        ).one()
    assert (alarm.session_index, alarm.turn_no) == tuple(first_cold), alarm
    assert alarm.running_share > 0.9 and alarm.window_share < alarm.running_share / 2
    # and the worker's reconciler logged it once, at WARNING (it looks every 0.5 s, also
    # at runs that just ended)
    deadline = time.monotonic() + 10
    while not (warned := _warnings(worker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(_warnings(worker)) == 1, warned
    assert f"starting at turn {alarm.turn}" in warned[0]
    # and status and report say so
    assert "cache alarm" in _cli(settings, "status", str(run_id))
    assert "CACHE ALARM" in _cli(settings, "report", str(run_id))
    assert '"cache_alarm": {' in _cli(settings, "status", str(run_id), "--json")


def _warnings(worker: WorkerProcess) -> list[str]:
    return [line for line in worker.log if "WARNING" in line and "cache share fell" in line]
