"""The web stack is loaded by ``serve`` alone."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def test_other_commands_do_not_load_the_web_stack() -> None:
    # When the command line is loaded, as every command loads it
    probe = "import sys, scheduler.cli; print(sorted({'starlette', 'uvicorn'} & set(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    # Then neither Starlette nor uvicorn was imported
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
