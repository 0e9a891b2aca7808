"""``scheduler report RUN_OR_LADDER``: what a run or a ladder cost and did.

The figures come from :mod:`scheduler.report.figures`; this module prints them as rich tables or
JSON, and hands them to :mod:`scheduler.report.html` for ``--html``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path

import click
from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from scheduler.report.figures import OUTCOMES, RunFigures, Target, jsonable
from scheduler.report.ladder_figures import Comparison, LadderFigures, figures_for
from worker.errors import InputError, RunNotFound
from worker.models.pricing import PriceTable
from worker.settings import Settings
from worker.store.engine import make_engine, require_migrated

__all__ = [
    "OUTCOME_LABELS",
    "arrow",
    "delta",
    "duration",
    "mib",
    "parse_target",
    "pct",
    "report",
    "report_view",
    "runs_of",
    "usd",
]

#: How each :data:`~scheduler.report.figures.OUTCOMES` bucket reads in a report.
OUTCOME_LABELS = {
    "verified": "verified",
    "failed_verification": "failed verification",
    "stopped": "stopped by a guard",
    "lost_to_retries": "lost to retries",
    "other_errors": "other errors",
    "cancelled": "cancelled",
    "unfinished": "still running",
}
#: Shorter headers of the same buckets, for an 80-column terminal.
_OUTCOME_HEADERS = {
    "verified": "verified",
    "failed_verification": "failed",
    "stopped": "stopped",
    "lost_to_retries": "retried out",
    "other_errors": "errored",
    "cancelled": "cancelled",
    "unfinished": "running",
}
_MIB = 1024 * 1024
_ARROW = "\N{RIGHTWARDS ARROW}"
_TEXT_COLUMNS = frozenset(
    {"tier", "structure", "profile", "model", "status", "by kind", "by reason"}
)


def parse_target(ctx: click.Context, param: click.Parameter, value: str) -> Target:
    """Click callback: ``12`` is a run, ``L3`` a ladder; anything else a usage error."""
    try:
        return Target.parse(value)
    except InputError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


@click.command()
@click.argument("target", metavar="RUN_OR_LADDER", callback=parse_target)
@click.option("--json", "as_json", is_flag=True, help="Print the figures as one JSON object.")
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write a self-contained HTML report (charts, gallery) to PATH.",
)
@click.pass_obj
def report(settings: Settings, target: Target, as_json: bool, html_path: Path | None) -> None:
    """Cost, errors, memory, tokens and outcomes of a run (12) or a ladder (L3)."""
    prices = PriceTable.load(settings.prices_file)
    engine = make_engine(settings)
    try:
        require_migrated(engine)
        with engine.connect() as conn:
            try:
                figures = figures_for(conn, target, prices=prices)
            except RunNotFound as exc:
                raise click.BadParameter(str(exc), param_hint="RUN_OR_LADDER") from None
            if html_path is not None:
                # Imported here: matplotlib and Jinja2 load only when a page is asked for,
                # and report_html imports this module's formatters.
                from scheduler.report.html import load_details, render_html

                page = render_html(figures, load_details(conn, runs_of(figures)))
    finally:
        engine.dispose()
    if html_path is not None:
        try:
            html_path.write_text(page, encoding="utf-8")
        except OSError as exc:
            raise click.FileError(str(html_path), hint=exc.strerror or str(exc)) from None
        click.echo(f"wrote {html_path} ({len(page.encode()) / 1024:,.0f} KiB)", err=as_json)
    if as_json:
        click.echo(json.dumps(jsonable(figures), indent=2))
    else:
        Console().print(report_view(figures))


def runs_of(figures: RunFigures | LadderFigures) -> list[RunFigures]:
    """The runs a report covers, in report order."""
    return figures.runs if isinstance(figures, LadderFigures) else [figures]


def usd(value: float | None) -> str:
    """Dollars with cents, or more digits under a dollar; ``-`` for none."""
    if value is None:
        return "-"
    return f"${value:,.2f}" if abs(value) >= 1 else f"${value:.4f}"


def pct(value: float | None, *, signed: bool = False) -> str:
    """A share (0..1) as a percentage; ``-`` for none."""
    return "-" if value is None else f"{value * 100:{'+' if signed else ''}.1f}%"


def mib(value: float | None) -> str:
    """Bytes in MiB; ``-`` for none."""
    return "-" if value is None else f"{value / _MIB:,.1f} MiB"


def duration(seconds: float | None) -> str:
    """Seconds as ``42.0 s``, ``3 m 05 s`` or ``1 h 02 m``; ``-`` for none."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} m {secs:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} m"


def arrow(before: object, after: object) -> str:
    """``before → after``."""
    return f"{before} {_ARROW} {after}"


def report_view(figures: RunFigures | LadderFigures) -> Group:
    """The figures as rich tables: runs, dollars by outcome, tokens, errors, memory."""
    runs = runs_of(figures)
    if isinstance(figures, LadderFigures):
        title = (
            f"ladder L{figures.ladder_id}  {figures.status}  (model {figures.model}, "
            f"tiers {', '.join(figures.tiers)}, profiles {', '.join(figures.profiles)})"
        )
    else:
        title = (
            f"run {figures.run_id}  {figures.status}  ({figures.structure}, model "
            f"{figures.model}, profile {figures.profile})"
        )
    spent = [o for o in OUTCOMES if any(r.dollars_by_outcome[o] for r in runs)]
    parts: list[Table | Text] = [
        Text(title, style="bold"),
        _table(
            "runs",
            runs,
            {
                "run": lambda r: str(r.run_id),
                "tier": lambda r: r.tier,
                "structure": lambda r: r.structure,
                "profile": lambda r: r.profile,
                "model": lambda r: r.model,
                "status": lambda r: r.status,
                "elapsed": lambda r: duration(r.elapsed_s),
            },
        ),
    ]
    parts.append(
        _table(
            "cost and turns",
            runs,
            {
                "run": lambda r: str(r.run_id),
                "cost": lambda r: usd(r.cost_usd),
                "verified": lambda r: f"{r.verified}/{r.sessions}",
                "$/verified": lambda r: usd(r.cost_per_verified_usd),
                "turns": lambda r: str(r.turns),
                "median/session": lambda r: _num(r.turns_per_session_median),
                "retries": lambda r: str(r.retries),
            },
        )
    )
    if isinstance(figures, LadderFigures) and figures.comparison_total is not None:
        parts.append(_comparison_table(figures))
    parts.append(
        _table(
            "dollars by how sessions ended",
            runs,
            {
                "run": lambda r: str(r.run_id),
                **{_OUTCOME_HEADERS[o]: _dollars(o) for o in spent},
                "total": lambda r: usd(r.cost_usd),
            },
            caption="endings that cost nothing are left out",
        )
    )
    parts.append(
        _table(
            "tokens",
            runs,
            {
                "run": lambda r: str(r.run_id),
                "prompt": lambda r: f"{r.tokens.prompt:,}",
                "cached": lambda r: f"{r.tokens.cached:,}",
                "cache share": lambda r: pct(r.tokens.cache_share),
                "output": lambda r: f"{r.tokens.output:,}",
                "thoughts": lambda r: f"{r.tokens.thoughts:,}",
                "tool use": lambda r: f"{r.tokens.tool_use:,}",
            },
        )
    )
    parts.append(
        _table(
            "tool errors and nudges",
            runs,
            {
                "run": lambda r: str(r.run_id),
                "tool errors": lambda r: str(r.tool_errors.total),
                "by kind": lambda r: _kinds(r.tool_errors.by_kind.items()),
                "nudges": lambda r: str(r.nudges.total),
                "by reason": lambda r: _kinds(r.nudges.by_reason.items()),
            },
        )
    )
    parts.append(
        _table(
            "memory",
            runs,
            {
                "run": lambda r: str(r.run_id),
                "peak RSS (sessions)": lambda r: mib(r.memory.sessions_peak_rss_bytes),
                "idle": lambda r: _idle(r, mib(r.memory.idle_rss_bytes), "none"),
                "per session": lambda r: _idle(r, mib(r.memory.rss_per_session_bytes), "unknown"),
                "browser peak": lambda r: mib(r.memory.browser_peak_rss_bytes),
                "samples": lambda r: str(r.memory.samples),
            },
            caption="per session = (peak - median idle RSS of that process) / sessions per wave"
            + (
                "; unknown: that process has no idle samples"
                if any(_no_idle(r) for r in runs)
                else ""
            ),
        )
    )
    return Group(*parts)


def _table(
    title: str,
    runs: list[RunFigures],
    columns: dict[str, Callable[[RunFigures], str]],
    caption: str | None = None,
) -> Table:
    """One row per run, a section line between profiles."""
    table = Table(
        title=title,
        title_justify="left",
        title_style="bold",
        box=box.SIMPLE_HEAD,
        caption=caption,
        caption_justify="left",
    )
    for name in columns:
        table.add_column(name, justify="left" if name in _TEXT_COLUMNS else "right")
    for i, run in enumerate(runs):
        if i and run.profile != runs[i - 1].profile:
            table.add_section()
        table.add_row(*(cell(run) for cell in columns.values()))
    return table


def _comparison_table(ladder: LadderFigures) -> Table:
    table = Table(
        title=f"{ladder.baseline} {_ARROW} {ladder.candidate}",
        title_justify="left",
        title_style="bold",
        box=box.SIMPLE_HEAD,
    )
    # No structure column: the runs table has it, and this one must fit 80 columns.
    for name in (
        "tier",
        str(ladder.baseline),
        str(ladder.candidate),
        "cost delta",
        "tool errors",
        "nudges",
    ):
        table.add_column(name, justify="left" if name == "tier" else "right", no_wrap=True)
    for c in [*ladder.comparison, ladder.comparison_total]:
        if c is None:
            continue
        if c is ladder.comparison_total:
            table.add_section()
        table.add_row(
            c.tier,
            usd(c.baseline_cost_usd),
            usd(c.candidate_cost_usd),
            delta(c),
            arrow(c.baseline_tool_errors, c.candidate_tool_errors),
            arrow(c.baseline_nudges, c.candidate_nudges),
        )
    return table


def delta(c: Comparison) -> str:
    """The candidate's cost against the baseline's, as ``-83.5% (-$0.60)``."""
    sign = "-" if c.delta_usd < 0 else "+"
    money = f"{sign}{usd(abs(c.delta_usd))}"
    return money if c.delta_pct is None else f"{c.delta_pct:+.1f}% ({money})"


def _dollars(outcome: str) -> Callable[[RunFigures], str]:
    return lambda r: usd(r.dollars_by_outcome[outcome])


def _kinds(items: Iterable[tuple[str, int]]) -> str:
    return ", ".join(f"{k} {n}" for k, n in items) or "-"


def _no_idle(run: RunFigures) -> bool:
    return run.memory.sessions_peak_rss_bytes is not None and run.memory.idle_rss_bytes is None


def _idle(run: RunFigures, text: str, missing: str) -> str:
    """Say that idle samples are missing rather than show a bare dash."""
    return missing if _no_idle(run) else text


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"
