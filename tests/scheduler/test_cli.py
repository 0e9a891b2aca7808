"""The scheduler CLI in-process (help, bad input, exit codes) and the embedded run."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from scheduler.cli.commands import EXIT_USAGE, cli
from tests.conftest import ROOT


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'swarm.db'}"
    assert CliRunner().invoke(cli, ["--database-url", url, "migrate"]).exit_code == 0
    return url


def test_help_lists_the_commands() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    for command in ("enqueue", "run", "status", "migrate"):
        assert command in result.output


def test_enqueue_documents_its_stall_threshold() -> None:
    result = CliRunner().invoke(cli, ["enqueue", "--help"])
    assert result.exit_code == 0
    assert "--stall-after-s" in result.output and "[default: 30" in result.output


def test_a_bad_setting_is_one_line_in_process() -> None:
    # The group itself turns a setting that does not validate into one line and exit 2
    result = CliRunner().invoke(cli, ["--broker-url", "amqp://guest@rabbit//", "status"])
    assert result.exit_code == EXIT_USAGE
    assert result.stderr.startswith("error: SWARM_BROKER_URL: unsupported broker 'amqp'")
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.parametrize("wave", ["10by10", "0x5", "3x0", "x", "200x200"])
def test_bad_wave_spec_is_a_clear_usage_error(wave: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "scheduler", "run", "--wave", wave],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == EXIT_USAGE
    assert "wave spec" in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_persona_and_model_are_refused(db: str) -> None:
    result = CliRunner().invoke(cli, ["--database-url", db, "enqueue", "--sim-mix", "lazy"])
    assert result.exit_code != 0 and "unknown persona" in result.output
    result = CliRunner().invoke(cli, ["--database-url", db, "enqueue", "--model", "gpt-9"])
    assert result.exit_code != 0
    assert "no provider serves model 'gpt-9'" in str(result.exception)


def test_status_of_a_missing_run(db: str) -> None:
    result = CliRunner().invoke(cli, ["--database-url", db, "status", "42"])
    assert result.exit_code != 0
    assert "no run 42" in str(result.exception)


def test_enqueue_refuses_an_unmigrated_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    result = CliRunner().invoke(cli, ["--database-url", url, "enqueue"])
    assert "scheduler migrate" in str(result.exception)


def test_embedded_run_needs_no_services(tmp_path: Path) -> None:
    # Given no reachable Redis or PostgreSQL (the configured ones point nowhere)
    env = {
        **os.environ,
        "SWARM_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
        "SWARM_BROKER_URL": "redis://127.0.0.1:1/0",
        # Artifacts are rendered in Chromium where it is installed; a busy test machine
        # must not fail a good page on its frame rate.
        "SWARM_VERIFY_MIN_FPS": "10",
    }
    # When a 2x2 swarm runs embedded
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "scheduler",
            "run",
            "--wave",
            "2x2",
            "--sim-latency-ms",
            "20",
            "--seed",
            "5",
            "--json",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    # Then it succeeds on its own SQLite file and prints the status JSON
    assert result.returncode == 0, result.stderr[-3000:]
    status = json.loads(result.stdout)
    assert status["sessions"]["succeeded"] == 4
    assert [w["status"] for w in status["waves"]] == ["finished", "finished"]
    assert status["artifacts"]["verified"] == 4
    assert (tmp_path / "swarm.db").exists()
    # and the run can be inspected afterwards from the same file
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "scheduler",
            "--database-url",
            f"sqlite:///{tmp_path / 'swarm.db'}",
            "status",
            "--json",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert json.loads(again.stdout)["run_id"] == status["run_id"]
    # and the embedded worker sampled itself like any worker, tagging samples with the run
    with sqlite3.connect(tmp_path / "swarm.db") as db:
        tagged = db.execute(
            "SELECT count(*) FROM samples WHERE run_id = ? AND role = 'sessions'",
            (status["run_id"],),
        ).fetchone()[0]
    assert tagged > 0
