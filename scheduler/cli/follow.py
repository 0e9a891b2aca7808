"""Follow a run until it ends, woken by the database's change notifications."""

from __future__ import annotations

import time
from contextlib import nullcontext

from rich.console import Console
from sqlalchemy import Engine

from scheduler.cli.views import RunProgress
from scheduler.report.figures import RunFigures, run_figures
from worker.models.pricing import PriceTable
from worker.states import RunStatus
from worker.store.engine import run_listener

#: Run states after which nothing more happens.
FINAL_RUN_STATES = frozenset({RunStatus.finished, RunStatus.cancelled})
#: Longest wait between two looks at the database (notifications usually come sooner).
REFRESH_S = 0.5


def until_finished(
    engine: Engine,
    run_id: int,
    *,
    show: bool,
    timeout_s: float | None = None,
    prices: PriceTable | None = None,
) -> RunFigures:
    """Block until the run ends; with ``show``, draw a live progress bar on stderr.

    Args:
        engine: The run's database.
        run_id: The run to follow.
        show: Draw the progress bar.
        timeout_s: Give up after this many seconds (None: wait for ever).
        prices: Prices of the figures' cost split (default: the built-in table).

    Returns:
        The figures of the ended run.

    Raises:
        TimeoutError: the run did not end within ``timeout_s``.
    """
    prices = prices if prices is not None else PriceTable.load()
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    progress = RunProgress(Console(stderr=True)) if show else nullcontext(None)
    with run_listener(engine) as listener, progress as update:
        while True:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} did not end within {timeout_s:g}s")
            with engine.connect() as conn:
                figures = run_figures(conn, run_id, prices=prices)
            if update is not None:
                update(figures)
            # A cancelled run is over once the turns it had in flight have ended too.
            if figures.status in FINAL_RUN_STATES and figures.finished_at is not None:
                return figures
            listener.wait(REFRESH_S)
