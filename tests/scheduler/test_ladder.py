"""Ladders: tiers run one after the other, once per profile, on real workers."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, select

from scheduler.cli import cli
from tests.conftest import WorkerProcess
from worker.config import RunConfig
from worker.errors import InputError
from worker.runs.ladders import create_ladder, parse_tiers
from worker.settings import Settings
from worker.store.engine import utcnow
from worker.store.tables import ladders, outbox, runs, sessions

pytestmark = pytest.mark.services


def test_tiers_are_wave_specs() -> None:
    assert parse_tiers("1, 5x1,5x5") == ("1", "5x1", "5x5")
    for bad in ("", "1,x", "0x3"):
        with pytest.raises(InputError):
            parse_tiers(bad)


def test_a_ladder_creates_every_run_and_starts_only_the_first(engine: Engine) -> None:
    with engine.begin() as conn:
        ladder_id, run_ids = create_ladder(
            conn,
            model="sim",
            tiers=("1", "2x3"),
            profiles=("baseline", "candidate"),
            config=RunConfig(waves="1", seed=4),
            now=utcnow(),
        )
        rows = conn.execute(
            select(runs.c.id, runs.c.profile, runs.c.tier, runs.c.config)
            .where(runs.c.ladder_id == ladder_id)
            .order_by(runs.c.id)
        ).all()
        due = conn.execute(select(outbox.c.run_id)).scalars().all()
        briefs = {
            r: conn.execute(
                select(sessions.c.brief).where(sessions.c.run_id == r).order_by(sessions.c.index)
            )
            .scalars()
            .all()
            for r in run_ids
        }
    assert [(r.profile, r.tier, r.config["waves"]) for r in rows] == [
        ("baseline", "1", "1x1"),
        ("baseline", "2x3", "2x3"),
        ("candidate", "1", "1x1"),
        ("candidate", "2x3", "2x3"),
    ]
    assert due == [run_ids[0]]
    # the same tier gives both profiles the same briefs
    assert briefs[run_ids[1]] == briefs[run_ids[3]]


@pytest.mark.slow
def test_the_ladder_command_runs_the_tiers_in_order(
    settings: Settings, engine: Engine, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given a worker
    start_worker()
    # When a two-tier ladder is run for both profiles
    result = CliRunner().invoke(
        cli,
        [
            "--database-url",
            settings.database_url,
            "--broker-url",
            settings.broker_url,
            "ladder",
            "--tiers",
            "1,2x2",
            "--profile",
            "baseline",
            "--profile",
            "candidate",
            "--sim-latency-ms",
            "20",
            "--seed",
            "9",
            "--json",
        ],
        catch_exceptions=False,
    )
    # Then every run succeeded, one after the other, and the ladder is finished
    assert result.exit_code == 0, result.output
    out = json.loads(result.output[result.output.index("{") :])
    statuses = out["runs"]
    assert [(s["profile"], s["tier"]) for s in statuses] == [
        ("baseline", "1"),
        ("baseline", "2x2"),
        ("candidate", "1"),
        ("candidate", "2x2"),
    ]
    assert all(s["sessions"]["succeeded"] == s["sessions"]["total"] for s in statuses)
    for earlier, later in itertools.pairwise(statuses):
        assert earlier["finished_at"] <= later["started_at"]
    with engine.connect() as conn:
        ladder = conn.execute(select(ladders).where(ladders.c.id == out["ladder"])).one()
    assert ladder.status == "finished" and ladder.finished_at is not None
