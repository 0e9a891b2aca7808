"""``python -m verifier check``: output, exit codes, in-process and as a real process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from verifier.cli import EXIT_FAILED, EXIT_PASSED, EXIT_UNJUDGED, cli

PAGES = Path(__file__).parent / "chromium" / "pages"
ROOT = Path(__file__).resolve().parents[2]
#: Passed as --min-fps: the machine running the tests may be busy (see conftest).
MIN_FPS = "15"


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.mark.browser
def test_good_page_passes_with_json(runner: CliRunner, tmp_path: Path) -> None:
    # Given the good page and a place for its screenshot
    shot = tmp_path / "shot.png"
    # When it is checked with --json
    result = runner.invoke(
        cli,
        [
            "check",
            str(PAGES / "good.html"),
            "--json",
            "--screenshot",
            str(shot),
            "--min-fps",
            MIN_FPS,
        ],
    )
    # Then it exits 0 and stdout is exactly one JSON object
    assert result.exit_code == EXIT_PASSED, result.output
    data = json.loads(result.stdout)
    assert data["passed"] is True
    assert data["fps"] >= float(MIN_FPS)
    assert len(data["checks"]) == 14
    assert "frame_cost" in {c["name"] for c in data["checks"]}
    assert data["ran"] == ["static", "browser"]
    assert data["skipped"] == {}
    assert result.stderr == ""
    assert shot.read_bytes().startswith(b"\x89PNG")


def test_static_failure_exits_1_with_a_table(runner: CliRunner) -> None:
    # Given a page that loads a script from a CDN
    # When it is checked (no browser is started for it)
    result = runner.invoke(cli, ["check", str(PAGES / "cdn_script.html")])
    # Then it exits 1 and the table names the failing check
    assert result.exit_code == EXIT_FAILED
    lines = result.stdout.splitlines()
    assert len(lines) == 6
    assert lines[3].startswith("FAIL  no_external_url")
    assert lines[-2] == "ran: static checks; skipped: browser checks (a static check failed)"
    assert lines[-1] == "FAILED (1 of 4)"


@pytest.mark.parametrize(
    ("args", "env", "reason"),
    [
        (["--static"], {}, "--static"),
        ([], {"SWARM_VERIFIER": "static"}, "SWARM_VERIFIER=static"),
        (
            [],
            {"SWARM_VERIFIER": "auto", "SWARM_CHROMIUM_PATH": "/nonexistent/chromium"},
            "Chromium not found at /nonexistent/chromium",
        ),
    ],
)
def test_static_only_says_the_browser_was_skipped_and_why(
    runner: CliRunner, args: list[str], env: dict[str, str], reason: str
) -> None:
    # Given the good page and a setting that keeps the browser out
    page = str(PAGES / "good.html")
    # When it is checked, as a table and as JSON
    table = runner.invoke(cli, ["check", page, *args], env=env)
    as_json = runner.invoke(cli, ["check", page, "--json", *args], env=env)
    # Then only the static checks ran, it passed on them, and both outputs say so
    assert table.exit_code == as_json.exit_code == EXIT_PASSED, table.output
    lines = table.stdout.splitlines()
    assert len(lines) == 6
    assert lines[-2] == f"ran: static checks; skipped: browser checks ({reason})"
    assert lines[-1] == "PASSED"
    data = json.loads(as_json.stdout)
    assert [c["name"] for c in data["checks"]] == [
        "size",
        "canvas_2d",
        "raf_loop",
        "no_external_url",
    ]
    assert data["fps"] is None
    assert data["ran"] == ["static"]
    assert data["skipped"] == {"browser": reason}


def test_browser_required_but_missing_exits_2(runner: CliRunner) -> None:
    env = {"SWARM_VERIFIER": "browser", "SWARM_CHROMIUM_PATH": "/nonexistent/chromium"}
    result = runner.invoke(cli, ["check", str(PAGES / "good.html")], env=env)
    assert result.exit_code == EXIT_UNJUDGED
    assert result.stdout == ""
    assert (
        result.stderr == "error: browser unavailable: Chromium not found at /nonexistent/chromium\n"
    )


@pytest.mark.browser
def test_browser_failure_exits_1(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["check", str(PAGES / "js_error.html"), "--json"])
    assert result.exit_code == EXIT_FAILED
    data = json.loads(result.stdout)
    assert [c["name"] for c in data["checks"] if not c["passed"]] == ["no_page_errors"]


def test_missing_file_exits_2(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(cli, ["check", str(tmp_path / "nope.html")])
    assert result.exit_code == EXIT_UNJUDGED
    assert result.stdout == ""
    assert result.stderr.startswith("error: cannot read")
    assert result.stderr.count("\n") == 1


def test_missing_chromium_exits_2(runner: CliRunner) -> None:
    result = runner.invoke(
        cli, ["check", str(PAGES / "good.html"), "--chromium", "/nonexistent/chromium"]
    )
    assert result.exit_code == EXIT_UNJUDGED
    assert result.stdout == ""
    assert result.stderr.startswith("error: browser unavailable: Chromium not found at")
    assert result.stderr.count("\n") == 1


@pytest.mark.browser
def test_module_entry_point(tmp_path: Path) -> None:
    # Given a real `python -m verifier` process
    # When it checks the good page and a missing file
    good = subprocess.run(
        [
            sys.executable,
            "-m",
            "verifier",
            "check",
            str(PAGES / "good.html"),
            "--json",
            "--min-fps",
            MIN_FPS,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    missing = subprocess.run(
        [sys.executable, "-m", "verifier", "check", str(tmp_path / "nope.html")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # Then the exit codes and output are those of the in-process CLI
    assert good.returncode == EXIT_PASSED, good.stderr
    assert json.loads(good.stdout)["passed"] is True
    assert missing.returncode == EXIT_UNJUDGED
    assert missing.stdout == ""
    assert "cannot read" in missing.stderr


def test_a_humaneval_solution_is_judged_offline_as_a_fleet_would(
    runner: CliRunner, tmp_path: Path
) -> None:
    from worker.tasks.humaneval.task import task as humaneval

    # Given the reference solution of HumanEval/3, and its untouched prompt, as files
    instance = humaneval.instance("HumanEval/3")
    good, bad = tmp_path / "mine.py", tmp_path / "prompt.py"
    good.write_text(humaneval.solution(instance)["solution.py"])
    bad.write_text(humaneval.files(instance)["solution.py"])
    args = ["check", "--task", "humaneval", "--instance", "HumanEval/3"]
    # When each is checked
    passed = runner.invoke(cli, [*args, str(good)])
    failed = runner.invoke(cli, [*args, str(bad), "--json"])
    # Then the solution passes its hidden test in the sandbox, and the prompt fails it with
    # what was called, not with the test
    assert passed.exit_code == EXIT_PASSED, passed.output
    assert "ran: static and sandbox checks" in passed.output
    assert failed.exit_code == EXIT_FAILED
    verdict = json.loads(failed.output)
    assert verdict["task"] == "humaneval" and verdict["sandbox"] is True
    hidden = next(c for c in verdict["checks"] if c["name"] == "hidden_test")
    assert "below_zero([]) returned None" in hidden["detail"]
    # And without an instance, or with one the task lacks, it says so in one line
    missing = runner.invoke(cli, ["check", "--task", "humaneval", str(good)])
    assert missing.exit_code == EXIT_UNJUDGED and "--instance is required" in missing.output
    unknown = runner.invoke(cli, [*args[:3], "--instance", "HumanEval/999", str(good)])
    assert unknown.exit_code == EXIT_UNJUDGED and "no instance 'HumanEval/999'" in unknown.output
