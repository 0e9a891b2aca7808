"""A run's score on its task: pass rate, pass@k over epochs, dollars per solved instance."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, update

from scheduler.cli import cli
from tests.factories import add_usage, make_run
from worker.models.pricing import PriceTable
from worker.reads.figures import run_figures
from worker.reads.tasks import pass_at_k
from worker.settings import Settings
from worker.store.tables import sessions


@pytest.mark.parametrize(
    ("n", "c", "k", "want"),
    [(5, 2, 1, 0.4), (5, 2, 2, 0.7), (5, 0, 3, 0.0), (5, 5, 5, 1.0), (10, 1, 10, 1.0)],
)
def test_pass_at_k_is_the_unbiased_estimator(n: int, c: int, k: int, want: float) -> None:
    # 1 - C(n-c, k) / C(n, k)
    assert pass_at_k(n, c, k) == pytest.approx(want)
    assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k))


@pytest.mark.services
def test_status_report_and_diff_give_the_task_figures(settings: Settings, engine: Engine) -> None:
    # Given a humaneval run of 2 instances x 3 epochs: the first solved twice, the second
    # never, with a dollar of usage on each session
    run_id, ids = make_run(
        engine, waves="3x2", task="humaneval", instances="0-1", epochs=3, start=False
    )
    wins = {ids[0], ids[4]}  # HumanEval/0 in epochs 0 and 2
    with engine.begin() as conn:
        for sid in ids:
            won = sid in wins
            conn.execute(
                update(sessions)
                .where(sessions.c.id == sid)
                .values(
                    status="succeeded" if won else "failed",
                    outcome="verified" if won else "failed_verification",
                )
            )
    for sid in ids:
        add_usage(engine, run_id=run_id, session_id=sid, cost_usd=1.0)
    # When its figures are read
    with engine.connect() as conn:
        task = run_figures(conn, run_id, prices=PriceTable.load()).task
    # Then they are the task's score
    assert task is not None
    assert (task.name, task.instances, task.epochs, task.passed, task.ended) == (
        "humaneval",
        2,
        3,
        2,
        6,
    )
    assert task.pass_rate == pytest.approx(2 / 6)
    # pass@1 averages 2/3 and 0; pass@2 averages 1 - C(1,2)/C(3,2) = 1 and 0
    assert task.pass_at_k == pytest.approx({1: 1 / 3, 2: 0.5})
    assert task.solved == 1 and task.usd_per_solved == pytest.approx(6.0)
    # And status --json, report and diff show them
    url = ["--database-url", settings.database_url]
    status = json.loads(CliRunner().invoke(cli, [*url, "status", str(run_id), "--json"]).output)
    assert status["task"]["pass_at_k"] == {"1": pytest.approx(1 / 3), "2": pytest.approx(0.5)}
    report = CliRunner().invoke(cli, [*url, "report", str(run_id)], env={"COLUMNS": "200"})
    assert "pass@2" in report.output and "1/2" in report.output
    diff = CliRunner().invoke(cli, [*url, "diff", str(run_id), str(run_id), "--json"])
    names = set(json.loads(diff.output)["figures"])
    assert {"pass_rate", "pass_at_1", "usd_per_solved", "turns_per_solve"} <= names
