"""``scheduler show SESSION``: a transcript of a finished embedded session, of a session
whose run still goes, of a fleet's session, and of none."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner, Result
from sqlalchemy import Engine, select

from scheduler.cli.commands import EXIT_USAGE, cli
from scheduler.cli.follow import until_finished
from tests.conftest import WorkerProcess
from tests.factories import call, enqueue, make_run, model_turn, page, run_script
from tests.worker.runs.conftest import RUN_TIMEOUT_S, scheduler
from worker.fleet.runtime import Runtime
from worker.settings import Settings
from worker.store.tables import sessions
from worker.tasks.humaneval.task import task as humaneval


def show(database_url: str, *args: str) -> Result:
    """``python -m scheduler show ARGS`` in-process, on that database."""
    return CliRunner().invoke(cli, ["--database-url", database_url, "show", *args])


def show_json(database_url: str, *args: str) -> dict[str, Any]:
    result = show(database_url, *args, "--json")
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout))


def _hidden_lines(instance_id: str) -> list[str]:
    """Lines of an instance's hidden test no transcript could hold by chance."""
    test = humaneval.instance(instance_id).hidden["test"]
    return [line.strip() for line in test.splitlines() if line.strip().startswith("assert")]


def test_a_finished_embedded_session_reads_turn_by_turn(sloppy_humaneval: str) -> None:
    # Given a finished embedded run whose sloppy session 1 was rejected once, then repaired
    # When its transcript is shown as text (stdout is not a terminal: plain, not paged)
    result = show(sloppy_humaneval, "1")
    # Then it has its four turns, the calls, the diffs, the verdicts and the ending
    assert result.exit_code == 0, result.output
    text = result.stdout
    lines = text.splitlines()
    assert lines[0].startswith("session 1: run 1, #0 of wave 1; humaneval HumanEval/0")
    assert [line.split(" · ")[0] for line in lines if line.startswith("── turn")] == [
        f"── turn {n}" for n in range(4)
    ]
    assert "starting files: solution.py" in text
    assert '  call manage_artifact(action="edit"' in text and "  call handoff(" in text
    assert "    +    raise NotImplementedError" in lines
    assert "    -    raise NotImplementedError" in lines
    assert any(line.startswith("    +") and "return" in line for line in lines)
    assert "verdict round 0 on solution.py v1: FAIL (sandbox" in text
    assert "    FAIL hidden_test: solution.has_close_elements(" in text
    assert "verdict round 1 on solution.py v2: PASS" in text
    assert "feedback (repair round 1): The verifier rejected the artifact" in text
    assert lines[-1] == "ended: succeeded (verified)"
    assert "\x1b[" not in text
    # and nothing of the hidden test but what its verdict said
    assert not [line for line in _hidden_lines("HumanEval/0") if line in text]


def test_a_finished_embedded_session_as_json(sloppy_humaneval: str) -> None:
    # When the same session is shown as JSON
    out = show_json(sloppy_humaneval, "1")
    # Then it has turns, each with its tool calls, versions, verdicts and usage
    turns = out["turns"]
    assert (out["session_id"], out["status"], out["outcome"]) == (1, "succeeded", "verified")
    assert [t["number"] for t in turns] == [0, 1, 2, 3]
    assert [[c["name"] for c in t["tool_calls"]] for t in turns] == [
        ["manage_artifact"],
        ["handoff"],
        ["manage_artifact"],
        ["handoff"],
    ]
    assert all(c["ok"] for t in turns for c in t["tool_calls"])
    edit = turns[2]["tool_calls"][0]
    assert edit["args"]["expected_version"] == 1
    assert edit["shortened"]["content"] == turns[2]["versions"][0]["size_bytes"]
    assert edit["args"]["content"].endswith("…")
    (v2,) = turns[2]["versions"]
    assert (v2["name"], v2["previous"], v2["version"]) == ("solution.py", 1, 2)
    assert "+    return False" in v2["diff"] and v2["added"] > 0
    rejected, passed = turns[1]["verdicts"][0], turns[3]["verdicts"][0]
    assert (rejected["passed"], passed["passed"]) == (False, True)
    assert [c["name"] for c in rejected["checks"]] == ["compiles", "hidden_test"]
    assert turns[2]["request"][0]["kind"] == "feedback"
    assert turns[1]["usage"]["cached_tokens"] > 0 and out["cost_usd"] > 0
    assert out["lease"]["claims"] == 6 and out["lease"]["other_claims"] == 0
    # When one turn is asked for
    one = show_json(sloppy_humaneval, "1", "--turn", "2")
    # Then only that turn is there
    assert [t["number"] for t in one["turns"]] == [2]


def test_an_unknown_session_or_turn_is_one_line(sloppy_humaneval: str) -> None:
    # When a session that does not exist is asked for
    result = show(sloppy_humaneval, "999")
    # Then one error line says so, and the exit code is the usage error's
    assert result.exit_code == EXIT_USAGE
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: no session 999")
    # and so for a turn the session does not have
    result = show(sloppy_humaneval, "1", "--turn", "7")
    assert result.exit_code == EXIT_USAGE
    assert result.stderr.strip() == "error: session 1 has no turn 7 (turns 0 to 3)"


@pytest.mark.services
def test_a_session_of_a_run_still_going(runtime: Runtime, settings: Settings) -> None:
    # Given a session that created its page, then edited it with a stale version, and
    # whose next turn is due (no worker runs it)
    _, (sid,) = make_run(runtime.engine)
    create = call("manage_artifact", action="create", name="dashboard.html", content=page("v1"))
    stale = call(
        "manage_artifact",
        action="edit",
        name="dashboard.html",
        content=page("v2"),
        expected_version=7,
    )
    assert run_script(runtime, sid, [model_turn(create, text="Drafting."), model_turn(stale)])
    # When its transcript is shown
    result = scheduler(settings, "show", str(sid))
    # Then it shows both turns, the conflict with its hint, and that turn 2 is due
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "── turn 0" in text and "── turn 1" in text and "── turn 2" not in text
    assert "  model: Drafting." in text
    assert "dashboard.html new, v1" in text and "    +++ dashboard.html v1" in text
    assert "    error conflict: dashboard.html is at version 1, not 7" in text
    assert "    hint: " in text
    assert text.splitlines()[-1] == "not ended: running: turn 2 due"
    out = json.loads(scheduler(settings, "show", str(sid), "--json").stdout)
    assert (out["status"], out["outcome"], out["next_turn"]) == ("running", None, 2)
    assert [c["ok"] for t in out["turns"] for c in t["tool_calls"]] == [True, False]


@pytest.mark.services
@pytest.mark.slow
def test_a_fleet_session(
    settings: Settings, engine: Engine, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given a finished fleet run (a worker process, Redis, PostgreSQL) of sloppy sessions
    start_worker()
    run_id = enqueue(settings, "--wave", "1x2", "--sim-latency-ms", "0", "--sim-mix", "sloppy")
    until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
    with engine.connect() as conn:
        ids = conn.execute(select(sessions.c.id).where(sessions.c.run_id == run_id)).scalars()
        sid = min(ids)
    # When one of its sessions is shown, as text and as JSON
    result = scheduler(settings, "show", str(sid))
    out = json.loads(scheduler(settings, "show", str(sid), "--json").stdout)
    # Then both tell the same turns, calls, versions and verdicts
    assert result.exit_code == 0, result.output
    turns = out["turns"]
    assert len(turns) >= 2 and out["status"] in ("succeeded", "failed")
    assert result.stdout.count("── turn ") == len(turns)
    calls = [c["name"] for t in turns for c in t["tool_calls"]]
    assert "manage_artifact" in calls and "handoff" in calls
    assert any(line.startswith("+") for t in turns for v in t["versions"] for line in v["diff"])
    verdicts = [v for t in turns for v in t["verdicts"]]
    assert verdicts and all(v["checks"] for v in verdicts)
    for v in verdicts:
        assert f"verdict round {v['round']} on {v['name']} v{v['version']}" in result.stdout
    assert result.stdout.splitlines()[-1].startswith(f"ended: {out['status']}")
