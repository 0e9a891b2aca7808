"""The one read model of a run: ``status`` and ``report`` read the same typed figures.

SQLite only: no services needed.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from dataclasses import fields
from datetime import UTC, datetime
from graphlib import TopologicalSorter
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, update

from scheduler.cli import cli
from scheduler.cli.options import _CONFIG_FIELDS
from scheduler.report.format import jsonable
from tests.conftest import ROOT
from tests.factories import make_run
from worker.config import RunConfig
from worker.models.pricing import PriceTable
from worker.reads.figures import SessionCounts, run_figures
from worker.settings import Settings
from worker.states import CostBucket, Outcome, RunStatus, SessionStatus
from worker.store.engine import make_engine, migrate
from worker.store.tables import runs, sessions


@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[tuple[Settings, Engine]]:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'swarm.db'}")
    migrate(settings.database_url)
    engine = make_engine(settings)
    yield settings, engine
    engine.dispose()


def test_session_counts_name_every_session_state() -> None:
    names = [f.name for f in fields(SessionCounts)]
    assert names[:2] == ["total", "ended"]
    assert names[2:] == [s.value for s in SessionStatus]


def test_status_and_report_read_the_same_figures(sqlite: tuple[Settings, Engine]) -> None:
    # Given a run whose sessions ended three ways, one still pending
    settings, engine = sqlite
    run_id, ids = make_run(engine, waves="2x2")
    endings = [Outcome.verified, Outcome.max_turns, Outcome.poison_turn, None]
    with engine.begin() as conn:
        for sid, outcome in zip(ids, endings, strict=True):
            if outcome is not None:
                conn.execute(
                    update(sessions)
                    .where(sessions.c.id == sid)
                    .values(status=outcome.status.value, outcome=outcome.value)
                )
    # When its figures are read
    with engine.connect() as conn:
        figures = run_figures(conn, run_id, prices=PriceTable.load())
    # Then the sessions are counted by state, and the outcome buckets are in report order
    counts = figures.sessions
    assert (counts.total, counts.ended, counts.succeeded, counts.stopped) == (4, 3, 1, 1)
    assert (counts.error, counts.pending) == (1, 1)
    assert list(figures.dollars_by_outcome) == list(CostBucket)
    assert figures.verified == 1 and figures.status is RunStatus.running
    assert [(w.index, w.size) for w in figures.waves] == [(1, 2), (2, 2)]
    # and `status --json` is those figures, with the keys of the report's JSON
    url = ["--database-url", settings.database_url]
    status = CliRunner().invoke(cli, [*url, "status", "--json"], catch_exceptions=False)
    report = CliRunner().invoke(cli, [*url, "report", str(run_id), "--json"])
    as_status, as_report = json.loads(status.output), json.loads(report.output)
    assert as_status == as_report == jsonable(figures)
    assert as_status["sessions"]["succeeded"] == 1 and as_status["status"] == "running"
    assert as_status["waves"][0]["status"] == "running"
    # and the text view, on a terminal wide enough for it, shows the counts by state and
    # each session with its instance
    text = CliRunner().invoke(
        cli, [*url, "status", "--sessions"], catch_exceptions=False, env={"COLUMNS": "140"}
    )
    assert "4 total: 1 succeeded, 1 stopped, 1 error, 1 pending" in text.output
    assert "succeeded  verified" in text.output and " 2     diligent  pending " in text.output
    assert "card-3" in text.output


def test_jsonable_writes_enum_values_and_iso_times() -> None:
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    value = {CostBucket.verified: [RunStatus.finished, at], "n": (1, None)}
    assert jsonable(value) == {
        "verified": ["finished", "2026-01-02T03:04:05+00:00"],
        "n": [1, None],
    }


def test_run_flags_default_to_the_run_config() -> None:
    config = RunConfig(waves="1x1")
    params = {p.name: p.default for p in cli.commands["run"].params}
    for name in _CONFIG_FIELDS:
        assert params[name] == getattr(config, name), name
    # Without --sim-mix a run plays its task's default persona
    assert params["sim_mix"] is None and config.sim_mix is None


def _imports(path: Path) -> set[str]:
    """Modules ``path`` imports at run time (``if TYPE_CHECKING:`` blocks left out)."""
    tree = ast.parse(path.read_text())
    skipped = {
        id(node)
        for guard in ast.walk(tree)
        if isinstance(guard, ast.If) and ast.unparse(guard.test) == "TYPE_CHECKING"
        for node in ast.walk(guard)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_the_report_imports_downward_only() -> None:
    # The report never imports click or the CLI, and its modules form no cycle.
    package = ROOT / "scheduler" / "report"
    graph = {f"scheduler.report.{p.stem}": _imports(p) for p in package.glob("*.py")}
    for module, imported in graph.items():
        assert not {m for m in imported if m == "click" or m.startswith("scheduler.cli")}, module
    internal = {m: {i for i in imported if i in graph} for m, imported in graph.items()}
    list(TopologicalSorter(internal).static_order())  # raises CycleError on a cycle


def test_status_and_report_show_spent_reserved_and_left(sqlite: tuple[Settings, Engine]) -> None:
    # Given a budgeted run that spent $0.10 and holds $0.25 for a call in flight
    settings, engine = sqlite
    run_id, _ = make_run(engine, budget_usd=1.0)
    with engine.begin() as conn:
        conn.execute(
            update(runs).where(runs.c.id == run_id).values(spent_usd=0.1, reserved_usd=0.25)
        )
    # When status (text and JSON) and report read it
    base = ["--database-url", settings.database_url]
    status = CliRunner().invoke(cli, [*base, "status", str(run_id)])
    as_json = CliRunner().invoke(cli, [*base, "status", str(run_id), "--json"])
    report = CliRunner().invoke(cli, [*base, "report", str(run_id)])
    # Then each shows what was spent, what is reserved and what is left
    line = "$0.1000 spent, $0.2500 reserved, $0.6500 left of $1.0000"
    assert status.exit_code == 0 and line in " ".join(status.output.split())
    assert report.exit_code == 0 and f"run {run_id} budget: {line}" in report.output
    budget = json.loads(as_json.output)["budget"]
    assert budget["reserves"] is True
    assert budget["left_usd"] == pytest.approx(0.65)
