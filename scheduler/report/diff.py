"""Two runs' figures side by side, with the ratio of each: what ``scheduler diff`` shows.

Everything is read from :class:`~worker.reads.figures.RunFigures`; nothing is queried.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from scheduler.report.format import mib, pct, usd
from worker.reads.figures import RunFigures

__all__ = ["FIGURES", "FigureDiff", "diff_runs"]


@dataclass(frozen=True)
class FigureDiff:
    """One figure of two runs, and ``b / a``."""

    name: str
    label: str
    a: float | None
    b: float | None
    ratio: float | None
    """``b / a``; None when either is unknown or ``a`` is zero."""
    a_text: str
    b_text: str


def _n(value: float | None) -> str:
    return "-" if value is None else f"{value:,g}"


def _tenths(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


#: The figures compared: JSON name, label, how to read it off a run, how it prints.
FIGURES: tuple[tuple[str, str, Callable[[RunFigures], float | None], Callable[..., str]], ...] = (
    ("cost_usd", "cost", lambda r: r.total_usd, usd),
    ("cost_per_verified_usd", "$ per verified artifact", lambda r: r.cost_per_verified_usd, usd),
    ("verified", "verified artifacts", lambda r: r.verified, _n),
    ("pass_rate", "pass rate", lambda r: r.task.pass_rate if r.task else None, pct),
    ("pass_at_1", "pass@1", lambda r: r.task.pass_at_k.get(1) if r.task else None, pct),
    (
        "usd_per_solved",
        "$ per solved instance",
        lambda r: r.task.usd_per_solved if r.task else None,
        usd,
    ),
    (
        "turns_per_solve",
        "turns per solve",
        lambda r: r.task.turns_per_solve if r.task else None,
        _tenths,
    ),
    ("sessions", "sessions", lambda r: r.sessions.total, _n),
    ("cache_share", "cache share", lambda r: r.tokens.cache_share, pct),
    ("tool_errors", "tool errors", lambda r: r.tool_errors.total, _n),
    ("turns", "turns", lambda r: r.turns, _n),
    ("turns_per_session", "turns per session (median)", lambda r: r.turns_per_session_median, _n),
    ("peak_rss_bytes", "peak RSS", lambda r: r.memory.sessions_peak_rss_bytes, mib),
    ("rss_per_session_bytes", "RSS per session", lambda r: r.memory.rss_per_session_bytes, mib),
)


def diff_runs(a: RunFigures, b: RunFigures) -> list[FigureDiff]:
    """Every figure of :data:`FIGURES` for runs ``a`` and ``b``, with ``b / a``."""
    rows = []
    for name, label, read, show in FIGURES:
        x, y = read(a), read(b)
        ratio = y / x if x and y is not None else None
        rows.append(FigureDiff(name, label, x, y, ratio, show(x), show(y)))
    return rows
