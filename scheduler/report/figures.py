"""What a run or a ladder cost and did, read from the database into frozen dataclasses.

Pure queries: nothing here prints or renders (ladders: :mod:`scheduler.report.ladder_figures`).
:mod:`scheduler.report.text` turns these figures
into a terminal table or JSON, :mod:`scheduler.report.html` into one self-contained page.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass
from datetime import datetime
from typing import Any, Literal, NamedTuple

from sqlalchemy import Subquery, func, select
from sqlalchemy.engine import Connection

from worker.errors import ConfigError, InputError, RunNotFound
from worker.models.pricing import PriceTable
from worker.states import SessionStatus
from worker.store.tables import events, runs, samples, sessions, usage, waves

__all__ = [
    "OUTCOMES",
    "TOKEN_KINDS",
    "Memory",
    "Nudges",
    "RunFigures",
    "Target",
    "Tokens",
    "ToolErrors",
    "WaveFigures",
    "jsonable",
    "outcome_of",
    "per_session",
    "run_figures",
    "split_cost",
]

#: Token kinds as reports name them, and their ``usage`` columns.
TOKEN_KINDS = {
    "prompt": "prompt_tokens",
    "cached": "cached_tokens",
    "output": "output_tokens",
    "thoughts": "thoughts_tokens",
    "tool_use": "tool_use_tokens",
}
#: Where a run's dollars went, by how each session ended, in report order.
OUTCOMES = (
    "verified",
    "failed_verification",
    "stopped",
    "lost_to_retries",
    "other_errors",
    "cancelled",
    "unfinished",
)
#: Session outcomes (of status ``error``) that mean retries used the session up.
RETRY_OUTCOMES = frozenset({"retries_exhausted", "poison_turn"})
#: Worker role whose processes run the sessions' turns.
SESSIONS_ROLE = "sessions"
#: Role of the verifier's Chromium process tree.
BROWSER_ROLE = "browser"
#: Idle samples, the latest before a run, whose median is the worker's baseline.
IDLE_SAMPLES = 10

_TIMES = "\N{MULTIPLICATION SIGN}"
_TARGET_RE = re.compile(r"^\s*(?:[Ll](?P<ladder>\d+)|(?P<run>\d+))\s*$")


@dataclass(frozen=True)
class Target:
    """What a report is about: a run (written ``12``) or a ladder (written ``L3``)."""

    kind: Literal["run", "ladder"]
    id: int

    @classmethod
    def parse(cls, text: str) -> Target:
        """Parse ``12`` (a run) or ``L3`` (a ladder).

        Raises:
            InputError: neither form.
        """
        match = _TARGET_RE.match(text)
        if match is None:
            raise InputError(f"{text!r} is neither a run id (e.g. 12) nor a ladder id (e.g. L3)")
        if match["ladder"] is not None:
            return cls("ladder", int(match["ladder"]))
        return cls("run", int(match["run"]))

    def __str__(self) -> str:
        return f"L{self.id}" if self.kind == "ladder" else str(self.id)


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
class Tokens:
    """Tokens of a run by kind, and the share of prompt tokens served from cache."""

    prompt: int
    cached: int
    output: int
    thoughts: int
    tool_use: int
    cache_share: float | None
    """``cached / prompt``; None when no prompt token was sent."""


@dataclass(frozen=True)
class Memory:
    """Resident memory of the run's workers, from the samples tagged with the run."""

    sessions_peak_rss_bytes: int | None
    """Largest sample of a ``sessions`` worker; None when there is none."""
    peak_host: str | None
    peak_pid: int | None
    idle_rss_bytes: float | None
    """Median of the peak process's last idle (untagged) samples before the run; None without."""
    concurrent_sessions: int
    """Sessions per wave: what ran at once."""
    rss_per_session_bytes: float | None
    """``(peak - idle) / concurrent_sessions``; None without an idle figure."""
    browser_peak_rss_bytes: int | None
    """Largest sample of the verifier's browser tree; None when there is none."""
    samples: int


@dataclass(frozen=True)
class WaveFigures:
    """One wave: its size, its time span and its dollars, split by token kind."""

    index: int
    size: int
    started_at: datetime | None
    finished_at: datetime | None
    cost_usd: float
    cost_by_kind_usd: dict[str, float]
    """The wave's recorded dollars apportioned by what each token kind costs."""


@dataclass(frozen=True)
class RunFigures:
    """The figures of one run, one report row."""

    run_id: int
    ladder_id: int | None
    tier: str
    """``runs.tier``, or the run's wave spec when it is not part of a ladder."""
    structure: str
    """Count of waves by their size, as the report prints it (``5 waves`` by ``5``)."""
    waves: int
    wave_size: int
    sessions: int
    profile: str
    model: str
    status: str
    stop_reason: str | None
    started_at: datetime | None
    finished_at: datetime | None
    elapsed_s: float | None
    cost_usd: float
    """Sum of the run's ``usage.cost_usd``."""
    dollars_by_outcome: dict[str, float]
    """Usage dollars by how their session ended (keys: :data:`OUTCOMES`); sums to cost."""
    verified: int
    cost_per_verified_usd: float | None
    tool_errors: ToolErrors
    nudges: Nudges
    retries: int
    turns: int
    turns_per_session_median: float | None
    """Median over the sessions that took at least one turn."""
    tokens: Tokens
    memory: Memory
    wave_list: list[WaveFigures]


def run_figures(conn: Connection, run_id: int, *, prices: PriceTable) -> RunFigures:
    """Everything a report shows about one run.

    Raises:
        RunNotFound: no such run.
    """
    run = conn.execute(select(runs).where(runs.c.id == run_id)).first()
    if run is None:
        raise RunNotFound(f"no run {run_id}")
    wave_list = _waves(conn, run_id, prices)
    n_waves, size = len(wave_list), max((w.size for w in wave_list), default=0)
    ended = _sessions(conn, run_id)
    dollars = {o: math.fsum(s.cost_usd for s in ended if s.outcome == o) for o in OUTCOMES}
    turns = [s.turns for s in ended if s.turns > 0]
    verified = sum(1 for s in ended if s.outcome == "verified")
    cost = float(
        conn.execute(
            select(func.coalesce(func.sum(usage.c.cost_usd), 0.0)).where(usage.c.run_id == run_id)
        ).scalar_one()
    )
    elapsed = (
        (run.finished_at - run.started_at).total_seconds()
        if (run.started_at and run.finished_at)
        else None
    )
    return RunFigures(
        run_id=run.id,
        ladder_id=run.ladder_id,
        tier=run.tier or str(run.config.get("waves")),
        structure=f"{n_waves} wave{'' if n_waves == 1 else 's'} {_TIMES} {size}",
        waves=n_waves,
        wave_size=size,
        sessions=len(ended),
        profile=run.profile,
        model=run.model,
        status=run.status,
        stop_reason=run.stop_reason,
        started_at=run.started_at,
        finished_at=run.finished_at,
        elapsed_s=elapsed,
        cost_usd=cost,
        dollars_by_outcome=dollars,
        verified=verified,
        cost_per_verified_usd=cost / verified if verified else None,
        tool_errors=ToolErrors(*_counts(conn, run_id, "tool_error", "kind")),
        nudges=Nudges(*_counts(conn, run_id, "nudge", "reason")),
        retries=sum(s.retries for s in ended),
        turns=sum(turns),
        turns_per_session_median=float(statistics.median(turns)) if turns else None,
        tokens=_tokens(conn, run_id),
        memory=_memory(conn, run_id, size),
        wave_list=wave_list,
    )


def outcome_of(status: str, outcome: str | None) -> str:
    """The :data:`OUTCOMES` bucket of a session that is in ``status`` with ``outcome``."""
    if status == SessionStatus.error.value:
        return "lost_to_retries" if outcome in RETRY_OUTCOMES else "other_errors"
    return {
        SessionStatus.succeeded.value: "verified",
        SessionStatus.failed.value: "failed_verification",
        SessionStatus.stopped.value: "stopped",
        SessionStatus.cancelled.value: "cancelled",
    }.get(status, "unfinished")


class _Session(NamedTuple):
    outcome: str
    """The :data:`OUTCOMES` bucket."""
    turns: int
    cost_usd: float
    retries: int


def _sessions(conn: Connection, run_id: int) -> list[_Session]:
    """Per session: its outcome bucket, turns, usage dollars and counted model retries."""
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
        _Session(outcome_of(status, outcome), int(turns), float(cost), int(retries))
        for status, outcome, retries, turns, cost in rows
    ]


def per_session(run_id: int) -> Subquery:
    """Turns and usage dollars of each of the run's sessions, joined by session only."""
    ids = select(sessions.c.id).where(sessions.c.run_id == run_id)
    return (
        select(
            usage.c.session_id,
            func.count().label("turns"),
            func.sum(usage.c.cost_usd).label("cost"),
        )
        .where(usage.c.session_id.in_(ids))
        .group_by(usage.c.session_id)
        .subquery()
    )


def _counts(conn: Connection, run_id: int, kind: str, key: str) -> tuple[int, dict[str, int]]:
    """Events of ``kind`` in the run: the total, and the count of each ``payload[key]``."""
    label = events.c.payload[key].as_string()
    rows = conn.execute(
        select(label, func.count())
        .join_from(events, sessions, events.c.session_id == sessions.c.id)
        .where(sessions.c.run_id == run_id, events.c.kind == kind)
        .group_by(label)
    ).all()
    by_key = {str(k or "unknown"): int(n) for k, n in sorted(rows, key=lambda r: (-r[1], r[0]))}
    return sum(by_key.values()), by_key


def _tokens(conn: Connection, run_id: int) -> Tokens:
    sums = conn.execute(
        select(*[func.coalesce(func.sum(usage.c[c]), 0) for c in TOKEN_KINDS.values()]).where(
            usage.c.run_id == run_id
        )
    ).one()
    n = dict(zip(TOKEN_KINDS, (int(v) for v in sums), strict=True))
    return Tokens(**n, cache_share=n["cached"] / n["prompt"] if n["prompt"] else None)


def _memory(conn: Connection, run_id: int, concurrent: int) -> Memory:
    tagged = samples.c.run_id == run_id
    peak = conn.execute(
        select(samples.c.host, samples.c.pid, samples.c.rss_bytes)
        .where(tagged, samples.c.role == SESSIONS_ROLE)
        .order_by(samples.c.rss_bytes.desc(), samples.c.at)
        .limit(1)
    ).first()
    browser = conn.execute(
        select(func.max(samples.c.rss_bytes)).where(tagged, samples.c.role == BROWSER_ROLE)
    ).scalar()
    n_samples = conn.execute(select(func.count()).select_from(samples).where(tagged)).scalar()
    idle: float | None = None
    if peak is not None:
        # The baseline is the worker as it idled just before this run: later idle samples
        # already carry what earlier runs left behind in the process.
        first = conn.execute(
            select(func.min(samples.c.at)).where(
                tagged, samples.c.host == peak.host, samples.c.pid == peak.pid
            )
        ).scalar()
        values = (
            conn.execute(
                select(samples.c.rss_bytes)
                .where(
                    samples.c.host == peak.host,
                    samples.c.pid == peak.pid,
                    samples.c.role == SESSIONS_ROLE,
                    samples.c.run_id.is_(None),
                    samples.c.at < first,
                )
                .order_by(samples.c.at.desc())
                .limit(IDLE_SAMPLES)
            )
            .scalars()
            .all()
        )
        idle = float(statistics.median(values)) if values else None
    added = (
        (peak.rss_bytes - idle) / concurrent
        if peak is not None and idle is not None and concurrent
        else None
    )
    return Memory(
        sessions_peak_rss_bytes=int(peak.rss_bytes) if peak is not None else None,
        peak_host=peak.host if peak is not None else None,
        peak_pid=int(peak.pid) if peak is not None else None,
        idle_rss_bytes=idle,
        concurrent_sessions=concurrent,
        rss_per_session_bytes=added,
        browser_peak_rss_bytes=int(browser) if browser is not None else None,
        samples=int(n_samples or 0),
    )


def _waves(conn: Connection, run_id: int, prices: PriceTable) -> list[WaveFigures]:
    rows = conn.execute(
        select(
            waves.c.id,
            waves.c.index.label("wave_index"),
            waves.c.size,
            waves.c.started_at,
            waves.c.finished_at,
        )
        .where(waves.c.run_id == run_id)
        .order_by(waves.c.index)
    ).all()
    spent = conn.execute(
        select(
            sessions.c.wave_id,
            usage.c.model,
            func.sum(usage.c.cost_usd),
            *[func.sum(usage.c[c]) for c in TOKEN_KINDS.values()],
        )
        .join_from(usage, sessions, usage.c.session_id == sessions.c.id)
        .where(sessions.c.run_id == run_id)
        .group_by(sessions.c.wave_id, usage.c.model)
    ).all()
    by_wave: dict[int, list[tuple[str, float, dict[str, int]]]] = {}
    for wave_id, model, cost, *sums in spent:
        by_wave.setdefault(wave_id, []).append(
            (model, float(cost), dict(zip(TOKEN_KINDS, map(int, sums), strict=True)))
        )
    result = []
    for w in rows:
        parts: dict[str, float] = {}
        for model, cost, tokens in by_wave.get(w.id, []):
            for kind, dollars in split_cost(cost, tokens, prices, model).items():
                parts[kind] = parts.get(kind, 0.0) + dollars
        result.append(
            WaveFigures(
                index=w.wave_index,
                size=w.size,
                started_at=w.started_at,
                finished_at=w.finished_at,
                cost_usd=math.fsum(c for _, c, _ in by_wave.get(w.id, [])),
                cost_by_kind_usd=parts,
            )
        )
    return result


def split_cost(
    cost_usd: float, tokens: Mapping[str, int], prices: PriceTable, model: str
) -> dict[str, float]:
    """Apportion recorded dollars to token kinds by what each kind costs.

    The recorded dollars stay the truth (prices may have changed since); the price table only
    sets the shares. Tool-use prompt tokens are billed as input, thoughts as output. Dollars of
    a model without a price, or of calls without tokens, stay ``unpriced``.
    """
    try:
        p = prices.price(model)
    except ConfigError:
        p = None
    weights = (
        {}
        if p is None
        else {
            "uncached_prompt": max(tokens["prompt"] - tokens["cached"], 0) * p.input_per_m,
            "cached_prompt": tokens["cached"] * p.cached_input_per_m,
            "tool_use": tokens["tool_use"] * p.input_per_m,
            "output": tokens["output"] * p.output_per_m,
            "thoughts": tokens["thoughts"] * p.output_per_m,
        }
    )
    total = math.fsum(weights.values())
    if total <= 0:
        return {"unpriced": cost_usd} if cost_usd else {}
    return {kind: cost_usd * w / total for kind, w in weights.items()}


def jsonable(value: Any) -> Any:
    """Figures as plain JSON values: dataclasses to objects, datetimes to ISO 8601."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value
