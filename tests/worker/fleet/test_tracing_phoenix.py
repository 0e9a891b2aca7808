"""Traces reach a real receiver: a sim run's spans, read back from Arize Phoenix.

Phoenix is started by the test from its own virtualenv (``TEST_PHOENIX_VENV``, by default
``~/.cache/swarm/phoenix``, which CI fills): its dependencies clash with Swarm's. Locally a
missing Phoenix skips the test; in CI it fails it.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ops.phoenix import DEFAULT_VENV, PhoenixUnavailable, stored_spans
from ops.phoenix import phoenix as run_phoenix
from tests.conftest import ROOT

pytestmark = [pytest.mark.slow]

#: Seconds the run may take.
RUN_TIMEOUT_S = 180
#: Seconds the spans may take to be stored once the run has ended.
STORED_WITHIN_S = 60


@pytest.fixture(scope="module")
def phoenix() -> Iterator[str]:
    """A Phoenix server on 127.0.0.1 with a scratch working dir; yields its base URL."""
    venv = Path(os.environ.get("TEST_PHOENIX_VENV", DEFAULT_VENV)).expanduser()
    try:
        with run_phoenix(venv, path=os.environ.get("PATH", "")) as url:
            yield url
    except PhoenixUnavailable as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(exc))


def _rows(db: Path, query: str) -> list[sqlite3.Row]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return conn.execute(query).fetchall()
    finally:
        conn.close()


def test_a_sim_runs_traces_arrive_in_phoenix(phoenix: str, tmp_path: Path) -> None:
    # Given an embedded run told OpenTelemetry's endpoint (Phoenix's OTLP/HTTP)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SWARM_", "OTEL_"))}
    env.update(
        OTEL_EXPORTER_OTLP_ENDPOINT=phoenix,
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=f"{phoenix}/v1/traces",
        SWARM_VERIFIER="static",
        PYTHONPATH=str(ROOT),
    )
    # When it runs two sessions to the end
    result = subprocess.run(
        [sys.executable, "-m", "scheduler", "run", "--wave", "1x2", "--sim-latency-ms", "50"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    db = tmp_path / "swarm.db"
    sessions = _rows(db, "SELECT id, run_id, status, outcome FROM sessions")
    usage = _rows(db, "SELECT * FROM usage ORDER BY session_id, turn_no")
    tools = _rows(
        db,
        "SELECT session_id, turn_no, kind, payload FROM events"
        " WHERE kind IN ('tool_result', 'tool_error')",
    )
    assert len(sessions) == 2 and {s["status"] for s in sessions} == {"succeeded"}
    expected = len(sessions) * 2 + len(usage) * 2 + len(tools)  # session, verify; turn, chat
    deadline = time.monotonic() + STORED_WITHIN_S
    while len(spans := stored_spans(phoenix)) < expected and time.monotonic() < deadline:
        time.sleep(0.5)

    # Then Phoenix stored one trace per session, rooted at the session's own span
    traces: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for span in spans:
        traces[span["context"]["trace_id"]].append(span)
    assert len(traces) == len(sessions), [s["name"] for s in spans]
    by_id = {s["context"]["span_id"]: s for s in spans}
    for session in sessions:
        roots = [
            s for s in spans if s["name"] == f"session {session['id']}" and s["parent_id"] is None
        ]
        assert len(roots) == 1
        root = roots[0]
        trace = traces[root["context"]["trace_id"]]
        rows = [u for u in usage if u["session_id"] == session["id"]]
        attrs = root["attributes"]
        assert attrs["swarm.session_id"] == session["id"]
        assert attrs["swarm.run_id"] == session["run_id"]
        assert attrs["swarm.session.outcome"] == session["outcome"] == "verified"
        assert attrs["swarm.cost_usd"] == pytest.approx(sum(u["cost_usd"] for u in rows))
        # And a turn span per turn under it, each with its model call as billed
        turns = {
            s["attributes"]["swarm.turn_no"]: s
            for s in trace
            if s["name"].startswith("turn ") and s["parent_id"] == root["context"]["span_id"]
        }
        assert sorted(turns) == [u["turn_no"] for u in rows]
        for row in rows:
            turn = turns[row["turn_no"]]
            assert turn["attributes"]["swarm.session_id"] == session["id"]
            assert turn["attributes"]["swarm.run_id"] == session["run_id"]
            assert turn["attributes"]["swarm.cost_usd"] == pytest.approx(row["cost_usd"])
            children = [s for s in trace if s["parent_id"] == turn["context"]["span_id"]]
            (chat,) = [s for s in children if s["name"] == "chat sim"]
            a = chat["attributes"]
            assert a["gen_ai.operation.name"] == "chat"
            assert a["gen_ai.provider.name"] == a["gen_ai.system"] == "swarm.sim"
            assert a["gen_ai.request.model"] == a["gen_ai.response.model"] == "sim"
            assert a["gen_ai.usage.input_tokens"] == row["prompt_tokens"] + row["tool_use_tokens"]
            assert a["gen_ai.usage.cache_read.input_tokens"] == row["cached_tokens"]
            assert a["gen_ai.usage.output_tokens"] == row["output_tokens"] + row["thoughts_tokens"]
            assert a["gen_ai.usage.reasoning.output_tokens"] == row["thoughts_tokens"]
            assert list(a["gen_ai.response.finish_reasons"]) == ["STOP"]
            assert a["swarm.cost_usd"] == pytest.approx(row["cost_usd"])
            # And a span per tool call of the turn, named by the tool
            called = sorted(
                json.loads(t["payload"])["name"]
                for t in tools
                if (t["session_id"], t["turn_no"]) == (session["id"], row["turn_no"])
            )
            executed = [s for s in children if s["name"].startswith("execute_tool ")]
            assert sorted(s["attributes"]["gen_ai.tool.name"] for s in executed) == called
            assert {s["attributes"]["gen_ai.operation.name"] for s in executed} <= {"execute_tool"}
        # And the verification under the session, which it ended
        (verify,) = [s for s in trace if s["name"].startswith("verify round ")]
        assert by_id[verify["parent_id"]] is root
        assert verify["attributes"]["swarm.verification.result"] == "succeeded"
