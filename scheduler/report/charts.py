"""The report's charts: matplotlib figures rendered to inline SVG, in one house style."""

from __future__ import annotations

import functools
import io
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ParamSpec

from markupsafe import Markup, escape
from matplotlib import rc_context
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

from scheduler.report.format import BYTES_PER_MIB, OUTCOME_LABELS
from worker.reads.details import RunDetail
from worker.reads.figures import RunFigures
from worker.states import CostBucket

#: Parts of a wave's bill, bottom to top, with their colours.
COST_COLOURS = {
    "uncached_prompt": "#4c78a8",
    "cached_prompt": "#9ecae9",
    "tool_use": "#72b7b2",
    "output": "#f58518",
    "thoughts": "#ffbf79",
    "unpriced": "#bab0ac",
}
#: Colours of the dollars-by-outcome bars, in :class:`~worker.states.CostBucket` order.
OUTCOME_COLOURS = dict(
    zip(
        CostBucket,
        ("#54a24b", "#f58518", "#eeca3b", "#e45756", "#9d2b2b", "#bab0ac", "#d8d8d8"),
        strict=True,
    )
)
#: Line colours of worker roles in the memory chart.
ROLE_COLOURS = {"sessions": "#4c78a8", "verify": "#b279a2", "browser": "#f58518"}
_P = ParamSpec("_P")
# Typed loosely: matplotlib's stubs key rcParams by a Literal of every name.
_RC: dict[Any, Any] = {
    "font.size": 8.5,
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.axisbelow": True,
    "axes.grid": True,
    "grid.color": "#e6e6e6",
    # Glyphs as paths: the page looks the same where matplotlib's font is not installed.
    "svg.fonttype": "path",
    # Error kinds and profile names are data: a "$" in them must not start mathtext.
    "text.parse_math": False,
}


def _svg(fig: Figure, label: str) -> Markup:
    """The figure as an inline ``<svg>`` (its natural size, shrunk to fit by the CSS)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    head = f'<svg class="chart" role="img" aria-label="{escape(label)}"'
    return Markup(text[text.index("<svg") :].replace("<svg", head, 1))


def _themed(chart: Callable[_P, Markup | None]) -> Callable[_P, Markup | None]:
    """Draw ``chart`` under the report's matplotlib style (rcParams apply at every step)."""

    @functools.wraps(chart)
    def themed(*args: _P.args, **kwargs: _P.kwargs) -> Markup | None:
        with rc_context(_RC):
            return chart(*args, **kwargs)

    return themed


def _figure(width_in: float, height_in: float) -> Figure:
    return Figure(figsize=(width_in, height_in), layout="constrained")


def _label(run: RunFigures, many_profiles: bool) -> str:
    return f"{run.tier} {run.profile}" if many_profiles else f"run {run.run_id} ({run.tier})"


@_themed
def waste_chart(runs: Sequence[RunFigures]) -> Markup | None:
    """Dollars by outcome, one stacked horizontal bar per run."""
    if not any(r.cost_usd for r in runs):
        return None
    many = len({r.profile for r in runs}) > 1
    fig = _figure(9.0, 0.9 + 0.3 * len(runs))
    ax = fig.subplots()
    labels = [_label(r, many) for r in runs][::-1]
    left = [0.0] * len(runs)
    for bucket in CostBucket:
        values = [r.dollars_by_outcome[bucket] for r in runs][::-1]
        if any(values):
            ax.barh(
                labels,
                values,
                left=left,
                color=OUTCOME_COLOURS[bucket],
                label=OUTCOME_LABELS[bucket],
                height=0.62,
            )
            left = [a + b for a, b in zip(left, values, strict=True)]
    ax.set_xlabel("US dollars")
    ax.legend(loc="upper left", bbox_to_anchor=(1, 1), fontsize=7.5, frameon=False)
    return _svg(fig, "dollars by how sessions ended, per run")


@_themed
def errors_chart(runs: Sequence[RunFigures], colours: Mapping[str, str]) -> Markup | None:
    """Tool errors by kind and nudges by reason, one bar per profile for each."""
    totals: dict[str, dict[str, int]] = {}
    for run in runs:
        for prefix, counts in (("", run.tool_errors.by_kind), ("nudge: ", run.nudges.by_reason)):
            for kind, n in counts.items():
                per = totals.setdefault(prefix + kind, {})
                per[run.profile] = per.get(run.profile, 0) + n
    if not totals:
        return None
    kinds = sorted(totals, key=lambda k: sum(totals[k].values()))
    n = len(colours)
    fig = _figure(5.4, 0.8 + 0.28 * len(kinds) * n**0.5)
    ax = fig.subplots()
    height = 0.8 / n
    for i, (profile, colour) in enumerate(colours.items()):
        ys = [k + (n - 1 - 2 * i) * height / 2 for k in range(len(kinds))]
        ax.barh(
            ys,
            [totals[k].get(profile, 0) for k in kinds],
            height=height,
            color=colour,
            label=profile if n > 1 else None,
        )
    ax.set_yticks(range(len(kinds)), kinds)
    ax.set_xlabel("events")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if n > 1:
        ax.legend(frameon=False, fontsize=7.5, loc="lower right")
    return _svg(fig, "tool errors by kind and nudges by reason")


@_themed
def cache_chart(runs: Sequence[RunFigures], colours: Mapping[str, str]) -> Markup | None:
    """Share of prompt tokens served from cache, one bar per run."""
    shown = [r for r in runs if r.tokens.cache_share is not None]
    if not shown:
        return None
    many = len(colours) > 1
    fig = _figure(5.4, 2.6)
    ax = fig.subplots()
    labels = [_label(r, many) for r in shown]
    shares = [(r.tokens.cache_share or 0.0) * 100 for r in shown]
    bars = ax.bar(
        labels,
        shares,
        width=0.6 if len(shown) > 2 else 0.4,
        color=[colours.get(r.profile, "#4c78a8") for r in shown],
    )
    ax.bar_label(bars, fmt="%.1f%%", fontsize=7.5, padding=2)
    ax.set_ylim(0, 105)
    ax.set_ylabel("cached / prompt tokens (%)")
    ax.tick_params(axis="x", labelrotation=30 if len(shown) > 4 else 0)
    return _svg(fig, "share of prompt tokens served from cache, per run")


@_themed
def rss_chart(detail: RunDetail, run: RunFigures) -> Markup | None:
    """RSS of each sampled process over the run, wave starts marked."""
    if not detail.rss:
        return None
    starts = [w.started_at for w in run.waves if w.started_at is not None]
    t0 = min([run.started_at or s.at[0] for s in detail.rss] + starts)
    fig = _figure(5.4, 2.6)
    ax = fig.subplots()
    per_role: dict[str, int] = {}
    for s in detail.rss:
        n = per_role[s.role] = per_role.get(s.role, 0) + 1
        ax.plot(
            [(t - t0).total_seconds() for t in s.at],
            [b / BYTES_PER_MIB for b in s.rss_bytes],
            color=ROLE_COLOURS.get(s.role, "#555555"),
            linewidth=1.4,
            linestyle=("-", "--", ":", "-.")[(n - 1) % 4],
            label=f"{s.role} pid {s.pid}",
        )
    for wave in run.waves:
        if wave.started_at is not None:
            x = (wave.started_at - t0).total_seconds()
            ax.axvline(x, color="#999999", linewidth=0.8, linestyle=(0, (3, 3)))
            ax.annotate(
                f"w{wave.index}",
                (x, 1),
                xycoords=("data", "axes fraction"),
                xytext=(2, -2),
                textcoords="offset points",
                va="top",
                fontsize=7,
                color="#666666",
            )
    ax.set_xlabel("seconds since the run started")
    ax.set_ylabel("RSS (MiB)")
    ax.legend(frameon=False, fontsize=7, loc="upper left", bbox_to_anchor=(1, 1))
    return _svg(fig, f"RSS over time of run {run.run_id}'s processes")


@_themed
def wave_cost_chart(run: RunFigures) -> Markup | None:
    """Each wave's dollars, stacked by token kind."""
    if not any(w.cost_usd for w in run.waves):
        return None
    fig = _figure(5.4, 2.6)
    ax = fig.subplots()
    labels = [f"w{w.index}" for w in run.waves]
    bottom = [0.0] * len(labels)
    for kind, colour in COST_COLOURS.items():
        values = [w.cost_by_kind_usd.get(kind, 0.0) for w in run.waves]
        if any(values):
            ax.bar(
                labels, values, bottom=bottom, color=colour, label=kind.replace("_", " "), width=0.7
            )
            bottom = [a + b for a, b in zip(bottom, values, strict=True)]
    ax.set_ylabel("US dollars")
    ax.legend(frameon=False, fontsize=7, loc="upper left", bbox_to_anchor=(1, 1))
    return _svg(fig, f"cost per wave of run {run.run_id}, by token kind")


@_themed
def overhead_chart(run: RunFigures) -> Markup | None:
    """Turn overhead (everything but the model call) over the run: p50 and p99 per slice."""
    t = run.timings
    if t is None or not t.turns:
        return None
    series = t.over_time
    fig = _figure(5.4, 2.6)
    ax = fig.subplots()
    ax.plot(series.at_s, series.p50_ms, color="#4c78a8", linewidth=1.4, marker=".", label="p50")
    ax.plot(series.at_s, series.p99_ms, color="#e45756", linewidth=1.4, marker=".", label="p99")
    _log_ms_axis(ax)
    ax.set_xlabel("seconds since the first turn was claimed")
    ax.set_ylabel("overhead per turn (ms)")
    ax.legend(frameon=False, fontsize=7.5, loc="upper left", bbox_to_anchor=(1, 1))
    return _svg(fig, f"turn overhead over time of run {run.run_id}")


def ms_label(value: float, _: object = None) -> str:
    """A duration in milliseconds as a tick reads it: ``10 ms``, ``250 ms``, ``1.5 s``."""
    if value >= 1000:
        return f"{value / 1000:g} s"
    return f"{value:g} ms"


def _log_ms_axis(ax: Axes) -> None:
    """A logarithmic y axis of milliseconds, ticked at 1, 2 and 5 of each decade, in words.

    Math text is off in this style (data may hold a ``$``), so matplotlib's own log labels
    would print as their TeX source: every label is plain text instead.
    """
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(ms_label))
    ax.yaxis.set_minor_formatter(NullFormatter())
