"""Fixtures of the scheduler tests: a finished embedded run, made once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

#: Seconds the embedded run may take.
EMBEDDED_RUN_TIMEOUT_S = 240


@pytest.fixture(scope="session")
def sloppy_humaneval(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The database URL of a finished embedded humaneval run of two sloppy sessions.

    A sloppy session hands off a body that raises, is rejected by the hidden test, repairs
    its solution and passes: four turns, two versions, two verdicts.
    """
    where = tmp_path_factory.mktemp("sloppy-humaneval")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWARM_")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "scheduler",
            "run",
            "--task",
            "humaneval",
            "--wave",
            "1x2",
            "--sim-mix",
            "sloppy",
            "--sim-latency-ms",
            "0",
            "--seed",
            "3",
            "--json",
        ],
        cwd=where,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=EMBEDDED_RUN_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return f"sqlite:///{Path(where) / 'swarm.db'}"
