"""Prometheus metrics: a real worker serves them, and a scrape reads its turns."""

from __future__ import annotations

import re
import socket
import time
import urllib.request
from collections.abc import Callable

import pytest
from sqlalchemy import Engine, func, select

from scheduler.cli.follow import until_finished
from tests.conftest import WorkerProcess
from tests.factories import enqueue
from worker.settings import Settings
from worker.store.tables import usage

pytestmark = [pytest.mark.services, pytest.mark.slow]

#: Seconds the run may take.
RUN_TIMEOUT_S = 120


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return str(response.read().decode())


def _value(text: str, name: str, **labels: str) -> float:
    """The sample ``name{labels}`` of a scrape (labels in any order), or 0."""
    for line in text.splitlines():
        if not line.startswith(name + ("{" if labels else " ")):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.split(" ")[0]))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_worker_serves_its_turns_tokens_cost_and_memory(
    settings: Settings, engine: Engine, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given a worker with its metrics endpoint on a port of its own
    port = _free_port()
    worker = start_worker(SWARM_METRICS_PORT=str(port))
    assert any(f"metrics on http://127.0.0.1:{port}/metrics" in line for line in worker.log)
    # When a 1x2 sim run is under way, Then a scrape counts its sessions as running
    run_id = enqueue(settings, "--wave", "1x2", "--sim-latency-ms", "200")
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while _value(_scrape(port), "swarm_sessions", status="running") < 1:
        assert time.monotonic() < deadline, "the sessions never showed as running"
        time.sleep(0.05)
    # When the run goes to its end and Prometheus scrapes the worker again
    until_finished(engine, run_id, show=False, timeout_s=RUN_TIMEOUT_S)
    with engine.connect() as conn:
        committed, prompt, cost = conn.execute(
            select(func.count(), func.sum(usage.c.prompt_tokens), func.sum(usage.c.cost_usd))
        ).one()
    text = _scrape(port)
    # Then it counts every committed turn, with its phases, tokens and dollars
    assert _value(text, "swarm_turns_total", outcome="committed") == committed > 0
    for phase in ("queue", "claim", "rebuild", "model", "tools", "commit", "overhead"):
        n = _value(text, "swarm_turn_phase_seconds_count", phase=phase)
        assert n == committed, phase
    model_s = _value(text, "swarm_turn_phase_seconds_sum", phase="model")
    assert model_s >= committed * 0.15
    assert _value(text, "swarm_turn_cpu_seconds_count") == committed
    assert _value(text, "swarm_tokens_total", model="sim", kind="prompt") == prompt
    assert _value(text, "swarm_cost_usd_total", model="sim") == pytest.approx(cost)
    # and its memory
    assert _value(text, "swarm_worker_rss_bytes") > 50 * 1024 * 1024
