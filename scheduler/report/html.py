"""``report --html``: one page with tables, charts and the artifact gallery.

Nothing on the page is fetched from the network: CSS is inline, charts are inline SVG drawn
by matplotlib (no pyplot, no global backend), thumbnails are ``data:`` URIs. The gallery's
full-size screenshots and the videos of recorded runs are files in a directory beside the
page (:func:`~scheduler.report.gallery.write_assets`): each thumbnail links its screenshot,
and each video plays in place. The template is Jinja2 with autoescaping on; only the SVG
that matplotlib wrote is marked safe.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from jinja2 import Environment, PackageLoader, select_autoescape

from scheduler.report.charts import (
    OUTCOME_COLOURS,
    cache_chart,
    errors_chart,
    overhead_chart,
    rss_chart,
    waste_chart,
    wave_cost_chart,
)
from scheduler.report.format import OUTCOME_LABELS, arrow, delta, duration, mib, ms, pct, usd
from scheduler.report.gallery import data_uri, thumb_size
from worker.reads.details import RssSeries, RunDetail, Shot, load_details
from worker.reads.figures import RunFigures
from worker.reads.ladders import LadderFigures, runs_of
from worker.states import CostBucket

__all__ = [
    "RssSeries",
    "RunDetail",
    "Shot",
    "kpis",
    "load_details",
    "profile_colours",
    "render_html",
]

#: Bar colours of a ladder's baseline and candidate profiles.
BASELINE_COLOUR, CANDIDATE_COLOUR = "#e76f51", "#2a9d8f"
#: Bar colours of other profiles, in ladder order.
PROFILE_COLOURS = ("#2a9d8f", "#e76f51", "#8c6bb1", "#264653", "#8c8c8c")


def render_html(figures: RunFigures | LadderFigures, details: Mapping[int, RunDetail]) -> str:
    """The whole report page for a run or a ladder."""
    runs = runs_of(figures)
    ladder = figures if isinstance(figures, LadderFigures) else None
    profiles = ladder.profiles if ladder else [runs[0].profile]
    tiers = ladder.tiers if ladder else [runs[0].tier]
    grid = [
        (tier, [[r for r in runs if r.tier == tier and r.profile == p] for p in profiles])
        for tier in tiers
        if any(r.tier == tier for r in runs)
    ]
    colours = profile_colours(profiles, ladder)
    env = Environment(
        loader=PackageLoader("scheduler.report", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    env.filters.update(usd=usd, pct=pct, mib=mib, duration=duration, ms=ms)
    return env.get_template("report.html.j2").render(
        ladder=ladder,
        runs=runs,
        profiles=profiles,
        grid=grid,
        details=details,
        kpis=[(p, kpis([r for r in runs if r.profile == p])) for p in profiles],
        outcomes=[(b, OUTCOME_LABELS[b], OUTCOME_COLOURS[b]) for b in CostBucket],
        arrow=arrow,
        delta=delta,
        data_uri=data_uri,
        thumb_size=thumb_size,
        rss_chart=rss_chart,
        wave_cost_chart=wave_cost_chart,
        overhead_chart=overhead_chart,
        charts={
            "waste": waste_chart(runs),
            "errors": errors_chart(runs, colours),
            "cache": cache_chart(runs, colours),
        },
    )


def profile_colours(profiles: Sequence[str], ladder: LadderFigures | None) -> dict[str, str]:
    """A colour per profile, in profile order; baseline and candidate keep theirs."""
    colours = {p: PROFILE_COLOURS[i % len(PROFILE_COLOURS)] for i, p in enumerate(profiles)}
    if ladder is not None and ladder.baseline and ladder.candidate:
        colours.update({ladder.baseline: BASELINE_COLOUR, ladder.candidate: CANDIDATE_COLOUR})
    return colours


def kpis(runs: Sequence[RunFigures]) -> list[tuple[str, str, str]]:
    """Headline figures of some runs (one profile's): label, value, a note under it."""
    cost = sum(r.cost_usd for r in runs)
    verified, total = sum(r.verified for r in runs), sum(r.sessions.total for r in runs)
    prompt, cached = sum(r.tokens.prompt for r in runs), sum(r.tokens.cached for r in runs)
    peaks = [
        r.memory.sessions_peak_rss_bytes
        for r in runs
        if r.memory.sessions_peak_rss_bytes is not None
    ]
    browser = [
        r.memory.browser_peak_rss_bytes for r in runs if r.memory.browser_peak_rss_bytes is not None
    ]
    elapsed = [r.elapsed_s for r in runs if r.elapsed_s is not None]
    one = runs[0] if len(runs) == 1 else None
    rss_note = "session workers"
    if one is not None and one.memory.sessions_peak_rss_bytes is not None:
        added = one.memory.rss_per_session_bytes
        rss_note = "no idle samples" if added is None else f"{mib(added)} per session"
    return [
        *_warnings(one),
        ("cost", usd(cost), one.structure if one else f"{len(runs)} runs"),
        (
            "cache storage",
            usd(math.fsum(r.cache_storage_usd for r in runs)),
            f"{math.fsum(r.cache_token_hours for r in runs):,.0f} token-hours of explicit cache",
        ),
        ("verified", f"{verified}/{total}", pct(verified / total) if total else ""),
        ("$ per verified", usd(cost / verified) if verified else "-", "artifact"),
        (
            "tool errors",
            str(sum(r.tool_errors.total for r in runs)),
            f"{sum(r.nudges.total for r in runs)} nudges",
        ),
        (
            "model retries",
            str(sum(r.retries for r in runs)),
            f"{sum(r.turns for r in runs):,} turns",
        ),
        ("prompt cache", pct(cached / prompt) if prompt else "-", f"{cached:,} cached tokens"),
        ("peak RSS", mib(max(peaks)) if peaks else "-", rss_note),
        ("browser peak", mib(max(browser)) if browser else "-", "verifier's Chromium"),
        (
            "elapsed",
            duration(sum(elapsed)) if elapsed else "-",
            one.status.value if one else "sum of runs",
        ),
    ]


def _warnings(run: RunFigures | None) -> list[tuple[str, str, str]]:
    """A single run's budget, its forecast and its cache-share alarm, as headline cards."""
    cards = []
    if run is not None and run.budget is not None:
        b = run.budget
        cards.append(
            (
                "budget",
                f"{usd(b.left_usd)} left",
                f"{usd(b.spent_usd)} spent, {usd(b.reserved_usd)} reserved of {usd(b.budget_usd)}",
            )
        )
    if run is not None and run.forecast is not None and run.forecast.budget_usd is not None:
        f = run.forecast
        cards.append(
            ("forecast", usd(f.projected_usd), f"up to {usd(f.high_usd)} of {usd(f.budget_usd)}")
        )
    if run is not None and run.cache_alarm is not None:
        cards.append(("cache alarm", f"turn {run.cache_alarm.turn}", run.cache_alarm.describe()))
    return cards
