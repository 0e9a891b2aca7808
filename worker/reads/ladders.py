"""What a report is about (a run or a ladder), and what a ladder cost and did: its runs by
profile and tier, and the profiles compared."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from sqlalchemy import select
from sqlalchemy.engine import Connection

from worker.errors import InputError, LadderNotFound
from worker.models.pricing import PriceTable
from worker.reads.figures import RunFigures, run_figures
from worker.store.tables import ladders, runs

__all__ = [
    "Comparison",
    "LadderFigures",
    "ProfileTotals",
    "Target",
    "figures_for",
    "ladder_figures",
    "runs_of",
]

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


def figures_for(
    conn: Connection, target: Target, *, prices: PriceTable
) -> RunFigures | LadderFigures:
    """The figures of a run or of a ladder.

    Raises:
        RunNotFound: no such run (:class:`~worker.errors.LadderNotFound` for a ladder).
    """
    if target.kind == "ladder":
        return ladder_figures(conn, target.id, prices=prices)
    return run_figures(conn, target.id, prices=prices)


@dataclass(frozen=True)
class Comparison:
    """Candidate against baseline on one tier, or on every tier both ran (``total``)."""

    tier: str
    structure: str
    baseline_run: int | None
    candidate_run: int | None
    baseline_cost_usd: float
    candidate_cost_usd: float
    delta_usd: float
    """``candidate - baseline``: negative when the candidate is cheaper."""
    delta_pct: float | None
    """``delta_usd`` as a percentage of the baseline; None when the baseline cost nothing."""
    baseline_tool_errors: int
    candidate_tool_errors: int
    baseline_nudges: int
    candidate_nudges: int


@dataclass(frozen=True)
class ProfileTotals:
    """A profile's runs of a ladder, added up."""

    profile: str
    runs: int
    sessions: int
    verified: int
    cost_usd: float
    cost_per_verified_usd: float | None
    tool_errors: int
    nudges: int
    retries: int


@dataclass(frozen=True)
class LadderFigures:
    """A ladder and its runs: grouped by profile, tiers in ladder order."""

    ladder_id: int
    model: str
    tiers: list[str]
    profiles: list[str]
    status: str
    created_at: datetime
    finished_at: datetime | None
    baseline: str | None
    """With exactly two profiles: ``baseline`` if it is one of them, else the first listed."""
    candidate: str | None
    runs: list[RunFigures]
    totals: list[ProfileTotals]
    comparison: list[Comparison]
    """One entry per tier both profiles ran (the latest run of each)."""
    comparison_total: Comparison | None


def runs_of(figures: RunFigures | LadderFigures) -> list[RunFigures]:
    """The runs a report covers, in report order."""
    return figures.runs if isinstance(figures, LadderFigures) else [figures]


def ladder_figures(conn: Connection, ladder_id: int, *, prices: PriceTable) -> LadderFigures:
    """Everything a report shows about a ladder, run by run.

    Raises:
        LadderNotFound: no such ladder.
    """
    row = conn.execute(select(ladders).where(ladders.c.id == ladder_id)).first()
    if row is None:
        raise LadderNotFound(f"no ladder L{ladder_id}")
    ids = (
        conn.execute(select(runs.c.id).where(runs.c.ladder_id == ladder_id).order_by(runs.c.id))
        .scalars()
        .all()
    )
    figs = [run_figures(conn, run_id, prices=prices) for run_id in ids]
    tiers = [*row.tiers, *sorted({f.tier for f in figs} - set(row.tiers))]
    profiles = [*row.profiles, *sorted({f.profile for f in figs} - set(row.profiles))]
    figs.sort(key=lambda f: (profiles.index(f.profile), tiers.index(f.tier), f.run_id))
    roles = _baseline_candidate(profiles)
    latest = {(f.profile, f.tier): f for f in sorted(figs, key=lambda f: f.run_id)}
    pairs = (
        []
        if roles is None
        else [
            (latest[roles[0], t], latest[roles[1], t])
            for t in tiers
            if (roles[0], t) in latest and (roles[1], t) in latest
        ]
    )
    comparison = [_compare(b.tier, b.structure, [b], [c]) for b, c in pairs]
    total = (
        _compare("total", f"{len(pairs)} tiers", [b for b, _ in pairs], [c for _, c in pairs])
        if pairs
        else None
    )
    return LadderFigures(
        ladder_id=row.id,
        model=row.model,
        tiers=tiers,
        profiles=profiles,
        status=row.status,
        created_at=row.created_at,
        finished_at=row.finished_at,
        baseline=roles[0] if roles else None,
        candidate=roles[1] if roles else None,
        runs=figs,
        totals=[_totals(p, [f for f in figs if f.profile == p]) for p in profiles],
        comparison=comparison,
        comparison_total=total,
    )


def _baseline_candidate(profiles: list[str]) -> tuple[str, str] | None:
    """With two profiles: ``baseline`` if it is one of them (else the first), the other."""
    if len(profiles) != 2:
        return None
    first, second = profiles
    return (second, first) if second == "baseline" else (first, second)


def _compare(
    tier: str, structure: str, base: list[RunFigures], cand: list[RunFigures]
) -> Comparison:
    b, c = math.fsum(f.cost_usd for f in base), math.fsum(f.cost_usd for f in cand)
    return Comparison(
        tier=tier,
        structure=structure,
        baseline_run=base[0].run_id if len(base) == 1 else None,
        candidate_run=cand[0].run_id if len(cand) == 1 else None,
        baseline_cost_usd=b,
        candidate_cost_usd=c,
        delta_usd=c - b,
        delta_pct=(c - b) / b * 100 if b else None,
        baseline_tool_errors=sum(f.tool_errors.total for f in base),
        candidate_tool_errors=sum(f.tool_errors.total for f in cand),
        baseline_nudges=sum(f.nudges.total for f in base),
        candidate_nudges=sum(f.nudges.total for f in cand),
    )


def _totals(profile: str, figs: list[RunFigures]) -> ProfileTotals:
    cost, verified = math.fsum(f.cost_usd for f in figs), sum(f.verified for f in figs)
    return ProfileTotals(
        profile=profile,
        runs=len(figs),
        sessions=sum(f.sessions.total for f in figs),
        verified=verified,
        cost_usd=cost,
        cost_per_verified_usd=cost / verified if verified else None,
        tool_errors=sum(f.tool_errors.total for f in figs),
        nudges=sum(f.nudges.total for f in figs),
        retries=sum(f.retries for f in figs),
    )
