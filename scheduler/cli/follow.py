"""Follow a run until it ends, woken by the database's change notifications."""

from __future__ import annotations

import time
from contextlib import nullcontext
from typing import Any

from rich.console import Console
from sqlalchemy import Engine

from scheduler.cli.views import RunProgress
from worker.store.engine import run_listener
from worker.store.queries import run_status

#: Run states after which nothing more happens.
FINAL_RUN_STATES = frozenset({"finished", "cancelled"})
#: Longest wait between two looks at the database (notifications usually come sooner).
REFRESH_S = 0.5


def until_finished(
    engine: Engine, run_id: int, *, show: bool, timeout_s: float | None = None
) -> dict[str, Any]:
    """Block until the run ends; with ``show``, draw a live progress bar on stderr.

    Raises:
        TimeoutError: the run did not end within ``timeout_s``.
    """
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    progress = RunProgress(Console(stderr=True)) if show else nullcontext(None)
    with run_listener(engine) as listener, progress as update:
        while True:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} did not end within {timeout_s:g}s")
            with engine.connect() as conn:
                status = run_status(conn, run_id)
            if update is not None:
                update(status)
            # A cancelled run is over once the turns it had in flight have ended too.
            if status["status"] in FINAL_RUN_STATES and status["finished_at"] is not None:
                return status
            listener.wait(REFRESH_S)
