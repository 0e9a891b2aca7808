"""Budget forecasting: what a run will have cost once every session has ended.

The method. The cost of a session is a draw from the run's own distribution, and the
ended sessions are a sample, without replacement, of the run's ``N`` sessions. With ``n``
ended sessions of mean cost ``m`` and standard deviation ``s``, the projected total is
``N * m``, with the interval ``N * (m ± t * s / sqrt(n) * sqrt(1 - n / N))``: Student's
``t`` at 95 % one-sided (``n - 1`` degrees of freedom), so the upper bound is a 95 % upper
confidence bound of the total, and the finite-population factor closes the interval to
the true total when the last session ends. It narrows as sessions end: ``t`` shrinks with
the degrees of freedom, ``s / sqrt(n)`` with the sample, and the factor with the share
still to come.

Sessions that the run itself cut short (the budget, a cancel, the forecast) are left out
of the sample: their cost says what the run allowed, not what a session costs. The
forecast needs two ended sessions; before that there is none.

With a budget, no new wave starts once the upper bound passes it (:func:`over_budget`):
the run ends ``stopped`` rather than start sessions it cannot pay to the end.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from worker.states import TERMINAL, Outcome
from worker.store.tables import runs, sessions, usage

__all__ = ["Forecast", "forecast", "project"]

#: Outcomes the run imposed on a session; their cost is not a session's cost.
CUT_SHORT = frozenset({Outcome.budget, Outcome.cancelled, Outcome.forecast})
#: Ended sessions the forecast needs at least.
MIN_SAMPLE = 2
#: Student's t at 95 % one-sided, by degrees of freedom (1 to 30); the normal's beyond.
_T95 = (
    6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812,
    1.796, 1.782, 1.771, 1.761, 1.753, 1.746, 1.740, 1.734, 1.729, 1.725,
    1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697,
)  # fmt: skip
_Z95 = 1.645


@dataclass(frozen=True)
class Forecast:
    """A run's projected total spend, from the sessions that ended."""

    sessions: int
    """Sessions in the run (``N``)."""
    sample: int
    """Ended sessions the projection rests on (``n``)."""
    mean_usd: float
    """Mean cost of those sessions."""
    projected_usd: float
    """``N * mean``."""
    low_usd: float
    """Lower end of the 90 % interval (a 95 % lower bound)."""
    high_usd: float
    """Upper end of the 90 % interval (a 95 % upper bound)."""
    budget_usd: float | None

    @property
    def over_budget(self) -> bool:
        """True when the upper bound passes the budget."""
        return self.budget_usd is not None and self.high_usd > self.budget_usd

    def describe(self) -> str:
        """One line: the projection, its interval, and where it stands against the budget."""
        text = (
            f"${self.projected_usd:.4f} (90% interval ${self.low_usd:.4f} to "
            f"${self.high_usd:.4f}) from {self.sample} of {self.sessions} sessions"
        )
        if self.budget_usd is not None:
            verdict = "over" if self.over_budget else "within"
            text += f"; {verdict} the ${self.budget_usd:.4f} budget"
        return text


def t95(df: int) -> float:
    """Student's t quantile at 95 % for ``df`` degrees of freedom (at least 1)."""
    return _T95[df - 1] if df <= len(_T95) else _Z95


def project(costs: list[float], *, sessions: int, budget_usd: float | None) -> Forecast | None:
    """The forecast from the costs of the ended sessions; None below :data:`MIN_SAMPLE`."""
    n = len(costs)
    if n < MIN_SAMPLE or sessions < n:
        return None
    mean = statistics.fmean(costs)
    fpc = math.sqrt(max(0.0, 1 - n / sessions))
    half = t95(n - 1) * statistics.stdev(costs) / math.sqrt(n) * fpc
    return Forecast(
        sessions=sessions,
        sample=n,
        mean_usd=mean,
        projected_usd=sessions * mean,
        low_usd=sessions * max(0.0, mean - half),
        high_usd=sessions * (mean + half),
        budget_usd=budget_usd,
    )


def forecast(conn: Connection, *, run_id: int) -> Forecast | None:
    """The run's forecast now; None until two sessions ended on their own."""
    budget = conn.execute(select(runs.c.budget_usd).where(runs.c.id == run_id)).scalar()
    total = conn.execute(
        select(func.count()).select_from(sessions).where(sessions.c.run_id == run_id)
    ).scalar_one()
    cost = (
        select(usage.c.session_id, func.sum(usage.c.cost_usd).label("cost"))
        .where(usage.c.run_id == run_id)
        .group_by(usage.c.session_id)
        .subquery()
    )
    rows = conn.execute(
        select(func.coalesce(cost.c.cost, 0.0))
        .select_from(sessions)
        .outerjoin(cost, cost.c.session_id == sessions.c.id)
        .where(
            sessions.c.run_id == run_id,
            sessions.c.status.in_([s.value for s in TERMINAL]),
            sessions.c.outcome.not_in([o.value for o in CUT_SHORT]),
        )
    ).scalars()
    return project(
        [float(c) for c in rows],
        sessions=int(total),
        budget_usd=float(budget) if budget is not None else None,
    )
