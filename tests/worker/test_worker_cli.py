"""A worker (``python -m worker`` or ``celery -A worker worker``) refuses bad settings with one
line, not a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.parametrize(
    "command",
    [["-m", "worker"], ["-m", "celery", "-A", "worker", "worker"]],
    ids=["python -m worker", "celery worker"],
)
@pytest.mark.parametrize(
    ("variable", "value", "names"),
    [
        ("SWARM_DATABASE_URL", "bogus://x", "unsupported database 'bogus'"),
        ("SWARM_LEASE_TTL_S", "-3", "SWARM_LEASE_TTL_S"),
    ],
)
def test_a_worker_with_bad_settings_says_what_is_wrong_in_one_line(
    command: list[str], variable: str, value: str, names: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWARM_")}
    env[variable] = value
    done = subprocess.run(
        [sys.executable, *command, "-P", "threads", "-c", "1"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: {variable}: ")
    assert names in lines[0]
