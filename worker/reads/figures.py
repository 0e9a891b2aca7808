"""The one read model of a run: what ``status``, ``--follow`` and ``report`` show, typed.

Pure queries into frozen dataclasses (waves and memory come from :mod:`.waves` and
:mod:`.memory`). The CLI's views and :mod:`.text` print them, :mod:`.html` draws them, and
:func:`~scheduler.report.format.jsonable` turns them into ``--json`` output.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from sqlalchemy import func, or_, select
from sqlalchemy.engine import Connection, Row

from worker.errors import RunNotFound
from worker.models.base import TokenUsage
from worker.models.pricing import PriceTable
from worker.reads.forks import ForkFigures, fork_figures
from worker.reads.memory import Memory, memory_figures
from worker.reads.queries import per_session
from worker.reads.tasks import TaskFigures, task_figures
from worker.reads.timings import TurnTimings, timing_figures
from worker.reads.waves import TOKEN_KINDS, WaveFigures, wave_figures
from worker.states import TERMINAL, CostBucket, Outcome, RunStatus, SessionStatus
from worker.store.cache_alarm import CacheAlarm, cache_alarm
from worker.store.forecast import Forecast, forecast
from worker.store.tables import (
    artifact_versions,
    artifacts,
    caches,
    events,
    runs,
    sessions,
    usage,
    verifications,
)

__all__ = [
    "Artifacts",
    "Memory",
    "Nudges",
    "RunFigures",
    "SessionCounts",
    "Tokens",
    "ToolErrors",
    "WaveFigures",
    "run_figures",
]


@dataclass(frozen=True)
class BudgetFigures:
    """Where a run with a budget stands: spent, held by calls in flight, and left."""

    budget_usd: float
    spent_usd: float
    """The dollars of the run's usage rows."""
    reserved_usd: float
    """The worst case of its calls in flight (and of calls whose outcome is not known)."""
    left_usd: float
    """What the budget leaves for calls not yet reserved."""
    reserves: bool
    """Calls are reserved before they are sent; False: checked as each turn starts."""

    def describe(self) -> str:
        """One line: spent, reserved and left of the budget."""
        text = (
            f"${self.spent_usd:.4f} spent, ${self.reserved_usd:.4f} reserved, "
            f"${self.left_usd:.4f} left of ${self.budget_usd:.4f}"
        )
        return text if self.reserves else text + " (checked per turn, not reserved)"


def _budget(run: Row[Any], cost_usd: float) -> BudgetFigures | None:
    if run.budget_usd is None:
        return None
    spent = float(run.spent_usd) if run.spent_usd is not None else cost_usd
    # A sum of holds added and taken away may leave a rounding crumb below zero.
    reserved = max(float(run.reserved_usd or 0.0), 0.0)
    reserves = run.config.get("reserve", "on") == "on"
    budget = float(run.budget_usd)
    return BudgetFigures(budget, spent, reserved, budget - spent - reserved, reserves)


@dataclass(frozen=True)
class SessionCounts:
    """A run's sessions: how many, how many ended, and how many are in each state."""

    total: int
    ended: int
    """Sessions in a terminal state (:data:`~worker.states.TERMINAL`)."""
    pending: int
    running: int
    verifying: int
    succeeded: int
    failed: int
    stopped: int
    cancelled: int
    error: int

    @classmethod
    def of(cls, statuses: Counter[SessionStatus]) -> SessionCounts:
        """Count the sessions of each :class:`~worker.states.SessionStatus`."""
        return cls(
            total=sum(statuses.values()),
            ended=sum(statuses[s] for s in TERMINAL),
            **{s.value: statuses[s] for s in SessionStatus},
        )

    def count(self, status: SessionStatus) -> int:
        """Sessions in ``status``."""
        return int(getattr(self, status.value))


@dataclass(frozen=True)
class Artifacts:
    """The run's artifacts, their versions, and the verdicts that passed them."""

    total: int
    versions: int
    verified: int
    """Passing verdicts, each by one method."""
    verified_by: dict[str, int]
    """Passing verdicts by verification method."""


@dataclass(frozen=True)
class ToolErrors:
    """``tool_error`` events: how many, and how many of each kind (most first)."""

    total: int
    by_kind: dict[str, int]


@dataclass(frozen=True)
class Nudges:
    """``nudge`` events: how many, and how many for each reason (most first)."""

    total: int
    by_reason: dict[str, int]


@dataclass(frozen=True)
class EndedInError:
    """Sessions that ended in error for one reason: the reason, its outcome, how many."""

    outcome: str
    reason: str
    sessions: int

    def describe(self) -> str:
        """``3 sessions (model_error): no Gemini API key …``."""
        plural = "" if self.sessions == 1 else "s"
        return f"{self.sessions} session{plural} ({self.outcome}): {self.reason}"


#: Longest reason a report quotes.
MAX_REASON_CHARS = 300


@dataclass(frozen=True)
class Tokens:
    """Tokens of a run by kind, and the share of prompt tokens served from cache."""

    prompt: int
    cached: int
    output: int
    thoughts: int
    tool_use: int
    total: int
    """Every token billed (:attr:`~worker.models.base.TokenUsage.total`)."""
    cache_share: float | None
    """``cached / prompt``; None when no prompt token was sent."""


@dataclass(frozen=True)
class RunFigures:
    """The figures of one run: its ``status``, and one row of a report."""

    run_id: int
    ladder_id: int | None
    tier: str
    """``runs.tier``, or the run's wave spec when it is not part of a ladder."""
    waves_spec: str
    """The wave spec the run was created with, e.g. ``2x2``."""
    structure: str
    """Count of waves by their size, as the report prints it (``5 waves`` by ``5``)."""
    wave_size: int
    profile: str
    model: str
    status: RunStatus
    stop_reason: str | None
    prefix_sha256: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    elapsed_s: float | None
    sessions: SessionCounts
    verified: int
    """Sessions that ended :attr:`~worker.states.Outcome.verified`."""
    artifacts: Artifacts
    turns: int
    turns_per_session_median: float | None
    """Median over the sessions that took at least one turn."""
    retries: int
    tokens: Tokens
    cost_usd: float
    """Sum of the run's ``usage.cost_usd``."""
    cost_per_verified_usd: float | None
    dollars_by_outcome: dict[CostBucket, float]
    """Usage dollars by how their session ended, in :class:`CostBucket` order; sums to cost."""
    tool_errors: ToolErrors
    nudges: Nudges
    memory: Memory
    waves: list[WaveFigures]
    cache_storage_usd: float = 0.0
    """Storage of the run's explicit caches, billed per token-hour; not in ``cost_usd``."""
    cache_token_hours: float = 0.0
    """Tokens times hours the run's explicit caches were kept."""
    timings: TurnTimings | None = None
    """The run's turn timing ledger: overhead and phase percentiles, duplicate turn tasks."""
    forks: tuple[ForkFigures, ...] = ()
    """The fork this run is, and the forks made of its sessions, each next to its origin."""
    forecast: Forecast | None = None
    """The run's projected total spend, once two sessions ended on their own."""
    cache_alarm: CacheAlarm | None = None
    """Where the run's cache share fell well below its running figure, if it did."""
    task: TaskFigures | None = None
    """How the sessions scored on the run's task."""
    ended_in_error: tuple[EndedInError, ...] = ()
    """Why sessions ended in error, the commonest reason first."""
    budget: BudgetFigures | None = None
    """With a budget: spent, reserved and left."""

    @property
    def total_usd(self) -> float:
        """Every dollar the run is billed: model calls and explicit cache storage."""
        return self.cost_usd + self.cache_storage_usd


def run_figures(conn: Connection, run_id: int, *, prices: PriceTable) -> RunFigures:
    """Everything ``status`` and a report show about one run.

    Args:
        conn: A connection to the run's database.
        run_id: The run.
        prices: Prices that split each wave's recorded dollars by token kind.

    Raises:
        RunNotFound: no such run.
    """
    run = conn.execute(select(runs).where(runs.c.id == run_id)).first()
    if run is None:
        raise RunNotFound(f"no run {run_id}")
    waves = wave_figures(conn, run_id, prices=prices)
    n_waves, size = len(waves), max((w.size for w in waves), default=0)
    per = _sessions(conn, run_id)
    dollars = {b: math.fsum(s.cost_usd for s in per if s.bucket is b) for b in CostBucket}
    turns = [s.turns for s in per if s.turns > 0]
    verified = sum(1 for s in per if s.bucket is CostBucket.verified)
    tokens, cost = _usage(conn, run_id)
    storage_usd, token_hours = _cache_storage(conn, run_id, prices=prices, now=datetime.now(UTC))
    waves_spec = str(run.config.get("waves"))
    start, end = run.started_at, run.finished_at
    return RunFigures(
        run_id=run.id,
        ladder_id=run.ladder_id,
        tier=run.tier or waves_spec,
        waves_spec=waves_spec,
        structure=f"{n_waves} wave{'' if n_waves == 1 else 's'} \N{MULTIPLICATION SIGN} {size}",
        wave_size=size,
        profile=run.profile,
        model=run.model,
        status=RunStatus(run.status),
        stop_reason=run.stop_reason,
        prefix_sha256=run.prefix_sha256,
        created_at=run.created_at,
        started_at=run.started_at,
        finished_at=run.finished_at,
        elapsed_s=(end - start).total_seconds() if start and end else None,
        sessions=SessionCounts.of(Counter(s.status for s in per)),
        verified=verified,
        artifacts=_artifacts(conn, run_id),
        turns=sum(turns),
        turns_per_session_median=float(statistics.median(turns)) if turns else None,
        retries=sum(s.retries for s in per),
        tokens=tokens,
        cost_usd=cost,
        cost_per_verified_usd=cost / verified if verified else None,
        dollars_by_outcome=dollars,
        tool_errors=ToolErrors(*_counts(conn, run_id, "tool_error", "kind")),
        nudges=Nudges(*_counts(conn, run_id, "nudge", "reason")),
        memory=memory_figures(conn, run_id, concurrent=size),
        waves=waves,
        cache_storage_usd=storage_usd,
        cache_token_hours=token_hours,
        timings=timing_figures(conn, run_id, duplicates=run.duplicate_turn_tasks),
        forks=fork_figures(conn, run_id),
        forecast=forecast(conn, run_id=run_id),
        cache_alarm=cache_alarm(conn, run_id=run_id),
        task=task_figures(conn, run_id, cost_usd=cost),
        ended_in_error=_ended_in_error(conn, run_id),
        budget=_budget(run, cost),
    )


def _ended_in_error(conn: Connection, run_id: int) -> tuple[EndedInError, ...]:
    """The reasons the run's sessions ended in error, with their counts: the scheduler of a
    fleet cannot see a worker's environment, so this is where a missing key shows."""
    rows = conn.execute(
        select(sessions.c.outcome, sessions.c.error, func.count())
        .where(sessions.c.run_id == run_id, sessions.c.status == SessionStatus.error.value)
        .group_by(sessions.c.outcome, sessions.c.error)
    ).all()
    found = [
        EndedInError(str(outcome or "-"), _reason(error), int(n)) for outcome, error, n in rows
    ]
    return tuple(sorted(found, key=lambda e: (-e.sessions, e.reason)))


def _reason(error: str | None) -> str:
    text = " ".join((error or "no reason recorded").split())
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 1] + "…"


class _Session(NamedTuple):
    status: SessionStatus
    bucket: CostBucket
    """Where its dollars go: its outcome's bucket, or ``unfinished`` while it runs."""
    turns: int
    cost_usd: float
    retries: int


def _sessions(conn: Connection, run_id: int) -> list[_Session]:
    """Per session: its state, outcome bucket, turns, usage dollars and model retries."""
    per = per_session(run_id)
    rows = conn.execute(
        select(
            sessions.c.status,
            sessions.c.outcome,
            sessions.c.model_retries,
            func.coalesce(per.c.turns, 0),
            func.coalesce(per.c.cost, 0.0),
        )
        .outerjoin(per, per.c.session_id == sessions.c.id)
        .where(sessions.c.run_id == run_id)
    ).all()
    return [
        _Session(
            SessionStatus(status),
            Outcome(outcome).bucket if outcome is not None else CostBucket.unfinished,
            int(turns),
            float(cost),
            int(retries),
        )
        for status, outcome, retries, turns, cost in rows
    ]


def _artifacts(conn: Connection, run_id: int) -> Artifacts:
    ids = select(sessions.c.id).where(sessions.c.run_id == run_id).scalar_subquery()
    n, versions = conn.execute(
        select(func.count(func.distinct(artifacts.c.id)), func.count(artifact_versions.c.id))
        .select_from(
            # Version 0 is a starting file: the session wrote none of it.
            artifacts.outerjoin(
                artifact_versions,
                (artifact_versions.c.artifact_id == artifacts.c.id)
                & (artifact_versions.c.version > 0),
            )
        )
        .where(artifacts.c.session_id.in_(ids))
    ).one()
    passed = conn.execute(
        select(verifications.c.method, func.count())
        .where(verifications.c.session_id.in_(ids), verifications.c.passed)
        .group_by(verifications.c.method)
        .order_by(verifications.c.method)
    ).all()
    by_method = {str(method): int(k) for method, k in passed}
    return Artifacts(int(n), int(versions), sum(by_method.values()), by_method)


def _counts(conn: Connection, run_id: int, kind: str, key: str) -> tuple[int, dict[str, int]]:
    """Events of ``kind`` in the run: the total, and the count of each ``payload[key]``.

    A fork's run counts only its own turns, not the history it copied from its origin.
    """
    label = events.c.payload[key].as_string()
    own = or_(runs.c.forked_at_turn.is_(None), events.c.turn_no >= runs.c.forked_at_turn)
    rows = conn.execute(
        select(label, func.count())
        .join_from(events, sessions, events.c.session_id == sessions.c.id)
        .join(runs, runs.c.id == sessions.c.run_id)
        .where(sessions.c.run_id == run_id, events.c.kind == kind, own)
        .group_by(label)
    ).all()
    by_key: Counter[str] = Counter()
    for k, n in rows:
        by_key[str(k or "unknown")] += int(n)
    return by_key.total(), dict(sorted(by_key.items(), key=lambda kv: (-kv[1], kv[0])))


def _cache_storage(
    conn: Connection, run_id: int, *, prices: PriceTable, now: datetime
) -> tuple[float, float]:
    """Dollars and token-hours of the run's explicit caches, from creation to deletion.

    A cache is billed until it was deleted or expired, whichever came first; one still
    alive is billed up to ``now``.
    """
    rows = conn.execute(
        select(
            caches.c.model,
            caches.c.tokens,
            caches.c.created_at,
            caches.c.expires_at,
            caches.c.deleted_at,
        ).where(caches.c.run_id == run_id)
    ).all()
    dollars, token_hours = [], []
    for model, tokens, created_at, expires_at, deleted_at in rows:
        ends = [t for t in (deleted_at, expires_at) if t is not None]
        end = min(ends) if ends else now
        hours = max((min(end, now) - created_at).total_seconds(), 0.0) / 3600
        dollars.append(prices.storage_usd(model, tokens=int(tokens), hours=hours))
        token_hours.append(int(tokens) * hours)
    return math.fsum(dollars), math.fsum(token_hours)


def _usage(conn: Connection, run_id: int) -> tuple[Tokens, float]:
    """The run's tokens by kind, and the sum of its ``usage.cost_usd``."""
    cost, *sums = conn.execute(
        select(
            func.coalesce(func.sum(usage.c.cost_usd), 0.0),
            *[func.coalesce(func.sum(usage.c[c]), 0) for c in TOKEN_KINDS.values()],
        ).where(usage.c.run_id == run_id)
    ).one()
    n = dict(zip(TOKEN_KINDS, (int(v) for v in sums), strict=True))
    total = TokenUsage(**{TOKEN_KINDS[kind]: v for kind, v in n.items()}).total
    share = n["cached"] / n["prompt"] if n["prompt"] else None
    return Tokens(**n, total=total, cache_share=share), float(cost)
