"""A Gemini run without a key: refused before anything is made here, explained on a fleet."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console
from sqlalchemy import Engine, select

from scheduler.cli import cli
from scheduler.cli.views import RunProgress
from tests.conftest import ROOT
from tests.factories import make_run
from worker.models.pricing import PriceTable
from worker.reads.figures import run_figures
from worker.settings import Settings
from worker.store.engine import make_engine
from worker.store.tables import runs, sessions


def test_an_embedded_gemini_run_without_a_key_is_refused_before_it_is_made(
    tmp_path: Path,
) -> None:
    # When a new user runs the embedded default on Gemini with no key in the environment
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "scheduler",
            "run",
            "--wave",
            "1x1",
            "--model",
            "gemini-3-flash-preview",
        ],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    # Then one line says what to set, the exit code is 2, and no run was made
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: no Gemini API key: set GEMINI_API_KEY (or GOOGLE_API_KEY) here"
    ]
    db = tmp_path / "swarm.db"
    if db.exists():
        engine = make_engine(Settings(database_url=f"sqlite:///{db}"))
        with engine.connect() as conn:
            assert conn.execute(select(runs.c.id)).first() is None
        engine.dispose()


@pytest.mark.services
def test_status_and_report_say_why_sessions_ended_in_error(
    settings: Settings, engine: Engine
) -> None:
    # Given a fleet run whose workers had no key: three sessions ended in error for it
    run_id, ids = make_run(engine, waves="1x4", model="gemini-3-flash-preview")
    reason = "no Gemini API key: set GEMINI_API_KEY (or GOOGLE_API_KEY) in the worker's environment"
    with engine.begin() as conn:
        for sid in ids[:3]:
            conn.execute(
                sessions.update()
                .where(sessions.c.id == sid)
                .values(status="error", outcome="model_error", error=reason)
            )
    url = ["--database-url", settings.database_url]
    # When its status and report are read
    text = CliRunner().invoke(cli, [*url, "status", str(run_id)], env={"COLUMNS": "200"})
    out = json.loads(CliRunner().invoke(cli, [*url, "status", str(run_id), "--json"]).output)
    report = CliRunner().invoke(cli, [*url, "report", str(run_id)], env={"COLUMNS": "200"})
    # Then each says why, with how many sessions ended so
    assert f"3 sessions (model_error): {reason}" in text.output
    assert out["ended_in_error"] == [{"outcome": "model_error", "reason": reason, "sessions": 3}]
    assert "why sessions ended in error" in report.output and reason in report.output


@pytest.mark.services
def test_follow_says_why_sessions_ended_in_error_while_the_run_goes_on(
    settings: Settings, engine: Engine
) -> None:
    # Given a fleet run still going, one of whose sessions ended in error for want of a key
    run_id, ids = make_run(engine, waves="1x3", model="gemini-3-flash-preview")
    reason = "no Gemini API key: set GEMINI_API_KEY (or GOOGLE_API_KEY) in the worker's environment"

    def end_in_error(*sids: int) -> None:
        with engine.begin() as conn:
            conn.execute(
                sessions.update()
                .where(sessions.c.id.in_(sids))
                .values(status="error", outcome="model_error", error=reason)
            )

    end_in_error(ids[0])
    out = io.StringIO()
    progress = RunProgress(Console(file=out, width=200, force_terminal=False))
    # When --follow's progress shows the run twice, and again once another session ended so
    with progress as update:
        for _ in range(2):
            with engine.connect() as conn:
                update(run_figures(conn, run_id, prices=PriceTable.load()))
        end_in_error(ids[1])
        with engine.connect() as conn:
            update(run_figures(conn, run_id, prices=PriceTable.load()))
    # Then it said why at once, while the run went on, and again only when the count grew
    lines = [line for line in out.getvalue().splitlines() if "ended in error" in line]
    assert lines == [
        f"1 session ended in error (model_error): {reason}",
        f"2 sessions ended in error (model_error): {reason}",
    ], out.getvalue()
