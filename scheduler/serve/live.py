"""A run's page, which follows the run while it goes on.

The page is drawn once; its ``#live`` section is then asked for again every
``refresh_s`` seconds (``/runs/N/live``, the same template's fragment) by
``/static/live.js``, which swaps it in place, until the response says the run has ended.
The page is never reloaded.

Why polling rather than Server-Sent Events: the store has no change feed (the embedded
SQLite file has none, and the workers do not notify PostgreSQL), so a stream would only
poll the database inside the server, once per open page, on a connection held open for as
long as the page is. A short request every few seconds asks the same query, keeps the server
stateless, shuts down at once and passes any proxy; and the fragment is drawn by the same
template as the page, so there is one rendering of a run, not one in Python and one in
JavaScript.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.engine import Connection
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse

from scheduler.serve.context import context_of, render
from worker.errors import RunNotFound
from worker.models.pricing import PriceTable
from worker.reads.figures import RunFigures, run_figures
from worker.reads.progress import run_ended
from worker.reads.queries import SessionRow, session_rows
from worker.states import SessionStatus

__all__ = ["ENDED_HEADER", "RunView", "RunWarning", "run_live", "run_page", "run_view", "warnings"]

#: Response header of the fragment: ``1`` once the run has ended and the page may stop asking.
ENDED_HEADER = "X-Swarm-Run-Ended"


@dataclass(frozen=True)
class RunWarning:
    """Something about the run that wants a look: a title and one line."""

    title: str
    text: str


@dataclass(frozen=True)
class RunView:
    """Everything a run's page shows."""

    figures: RunFigures
    sessions: list[SessionRow]
    by_state: list[tuple[SessionStatus, int]]
    """Every session state, with how many of the run's sessions are in it."""
    warnings: list[RunWarning]
    ended: bool


def run_view(conn: Connection, run_id: int, *, prices: PriceTable) -> RunView:
    """The run's figures, its sessions and its warnings.

    Raises:
        RunNotFound: no such run.
    """
    figures = run_figures(conn, run_id, prices=prices)
    return RunView(
        figures=figures,
        sessions=session_rows(conn, run_id),
        by_state=[(s, figures.sessions.count(s)) for s in SessionStatus],
        warnings=warnings(figures),
        ended=run_ended(conn, run_id),
    )


def warnings(figures: RunFigures) -> list[RunWarning]:
    """The run's cache-share alarm, its forecast over budget, its budget spent, why it
    stopped, and why sessions ended in error."""
    found = []
    if figures.cache_alarm is not None:
        found.append(RunWarning("cache alarm", figures.cache_alarm.describe()))
    if figures.forecast is not None and figures.forecast.over_budget:
        found.append(RunWarning("forecast over budget", figures.forecast.describe()))
    if figures.budget is not None and figures.budget.left_usd <= 0:
        found.append(RunWarning("budget spent", figures.budget.describe()))
    if figures.stop_reason:
        found.append(RunWarning(f"run {figures.status.value}", figures.stop_reason))
    found += [RunWarning("ended in error", e.describe()) for e in figures.ended_in_error]
    return found


def _view(request: Request) -> RunView:
    ctx = context_of(request)
    run_id = int(request.path_params["run_id"])
    with ctx.engine.connect() as conn:
        try:
            return run_view(conn, run_id, prices=ctx.prices)
        except RunNotFound as exc:
            raise HTTPException(404, str(exc)) from None


def run_page(request: Request) -> HTMLResponse:
    """``/runs/N``: the run's page."""
    view = _view(request)
    refresh_ms = round(context_of(request).refresh_s * 1000)
    title = f"Run {view.figures.run_id}"
    return render(request, "run.html.j2", v=view, refresh_ms=refresh_ms, title=title)


def run_live(request: Request) -> HTMLResponse:
    """``/runs/N/live``: the page's live section alone."""
    view = _view(request)
    response = render(request, "live.html.j2", v=view)
    response.headers[ENDED_HEADER] = "1" if view.ended else "0"
    response.headers["Cache-Control"] = "no-store"
    return response
