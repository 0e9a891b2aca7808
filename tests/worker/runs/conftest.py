"""Fixtures of the agent tests: a long session, run to its end by a real worker."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner, Result
from sqlalchemy import Engine, select

from scheduler.cli import cli
from scheduler.cli.follow import until_finished
from tests.conftest import WorkerProcess
from tests.factories import make_run
from worker.fleet.dispatch import CeleryDispatcher
from worker.settings import Settings
from worker.store.due import Dispatch
from worker.store.tables import sessions

#: Seconds a whole run in these tests may take.
RUN_TIMEOUT_S = 120


def scheduler(settings: Settings, *args: str) -> Result:
    """``python -m scheduler ARGS`` in-process, against the test services."""
    return CliRunner().invoke(
        cli,
        ["--database-url", settings.database_url, "--broker-url", settings.broker_url, *args],
    )


@pytest.fixture
def long_session(
    engine: Engine, app: Any, start_worker: Callable[..., WorkerProcess]
) -> Callable[..., int]:
    """Factory: a finished sim session of ten turns or more, run by a real worker; its id.

    An explorer probes the tools for 6 to 14 turns before it plans, publishes, refines and
    hands off; the idle-turn guard is raised so that it is not stopped for exploring, and
    every first draft carries a defect (with seed 21 one the handoff's static checks refuse,
    with 23 one only the browser verifier finds). ``env`` configures the worker, which stays
    up.
    """

    def make(seed: int = 21, **env: str) -> int:
        start_worker(**env)
        run_id, (session_id,) = make_run(
            engine, sim_mix={"explorer": 1.0}, loop_idle_turns=30, sim_flaw_rate=1.0, seed=seed
        )
        CeleryDispatcher(app).send(Dispatch(session_id, "turn", 0))
        status = until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
        assert status.turns >= 10, status
        assert status.artifacts.versions >= 2, status
        with engine.connect() as conn:
            ended = conn.execute(select(sessions.c.status).where(sessions.c.id == session_id))
            assert ended.scalar_one() == "succeeded"
        return session_id

    return make
