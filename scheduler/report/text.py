"""A run's or a ladder's figures as rich tables, for ``scheduler report`` in a terminal.

The figures come from :mod:`worker.reads.figures` and
:mod:`worker.reads.ladders`; the text of each cell from
:mod:`scheduler.report.format`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from scheduler.report.format import arrow, delta, duration, mib, ms, pct, usd
from worker.reads.figures import RunFigures
from worker.reads.forks import ForkFigures
from worker.reads.ladders import LadderFigures, runs_of
from worker.states import CostBucket

__all__ = ["fork_table", "report_view"]

#: Short headers of the :class:`~worker.states.CostBucket` columns, for an 80-column terminal.
_OUTCOME_HEADERS = {
    CostBucket.verified: "verified",
    CostBucket.failed_verification: "failed",
    CostBucket.stopped: "stopped",
    CostBucket.lost_to_retries: "retried out",
    CostBucket.other_errors: "errored",
    CostBucket.cancelled: "cancelled",
    CostBucket.unfinished: "running",
}
_TEXT_COLUMNS = frozenset(
    {"tier", "structure", "profile", "model", "status", "by kind", "by reason"}
)


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
            f"run {figures.run_id}  {figures.status.value}  ({figures.structure}, model "
            f"{figures.model}, profile {figures.profile})"
        )
    spent = [b for b in CostBucket if any(r.dollars_by_outcome[b] for r in runs)]
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
                "status": lambda r: r.status.value,
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
                "cache storage": lambda r: usd(r.cache_storage_usd),
                "verified": lambda r: f"{r.verified}/{r.sessions.total}",
                "$/verified": lambda r: usd(r.cost_per_verified_usd),
                "turns": lambda r: str(r.turns),
                "median/session": lambda r: _num(r.turns_per_session_median),
                "retries": lambda r: str(r.retries),
            },
        )
    )
    parts.append(task_table(runs))
    if isinstance(figures, LadderFigures) and figures.comparison_total is not None:
        parts.append(_comparison_table(figures))
    parts.append(
        _table(
            "dollars by how sessions ended",
            runs,
            {
                "run": lambda r: str(r.run_id),
                **{_OUTCOME_HEADERS[b]: _dollars(b) for b in spent},
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
    parts.append(_timings_table(runs))
    forks = [f for r in runs for f in r.forks]
    if forks:
        parts.append(fork_table(forks))
    errors = [(r, e) for r in runs for e in r.ended_in_error]
    if errors:
        table = Table("run", "sessions", "outcome", "why", title="why sessions ended in error")
        for r, e in errors:
            table.add_row(str(r.run_id), str(e.sessions), e.outcome, e.reason)
        parts.append(table)
    notes = [note for r in runs for note in _notes(r)]
    if notes:
        parts.append(Text("\n".join(notes)))
    return Group(*parts)


def task_table(runs: list[RunFigures]) -> Table:
    """Each run's score on its task: pass rate, pass@k, dollars per solved instance."""
    ks = sorted({k for r in runs if r.task for k in r.task.pass_at_k})
    columns: dict[str, Callable[[RunFigures], str]] = {
        "run": lambda r: str(r.run_id),
        "task": lambda r: f"{r.task.name} {r.task.version}" if r.task else "-",
        "instances": lambda r: f"{r.task.instances} x {r.task.epochs}" if r.task else "-",
        "passed": lambda r: f"{r.task.passed}/{r.task.ended}" if r.task else "-",
        "pass rate": lambda r: pct(r.task.pass_rate) if r.task else "-",
    }
    for k in ks:
        columns[f"pass@{k}"] = lambda r, k=k: (  # type: ignore[misc]
            pct(r.task.pass_at_k.get(k)) if r.task else "-"
        )
    columns |= {
        "solved": lambda r: f"{r.task.solved}/{r.task.instances}" if r.task else "-",
        "$/solved": lambda r: usd(r.task.usd_per_solved) if r.task else "-",
        "turns/solve": lambda r: (
            f"{r.task.turns_per_solve:.1f}"
            if r.task and r.task.turns_per_solve is not None
            else "-"
        ),
    }
    return _table("task", runs, columns, caption="pass@k: the unbiased estimator, over epochs")


def fork_table(forks: Sequence[ForkFigures]) -> Table:
    """Each fork under its origin: turns, dollars and outcome from the fork's turn on."""
    table = Table(
        title="forks next to their origins, counted from the turn each fork went live",
        title_justify="left",
        title_style="bold",
        box=box.SIMPLE_HEAD,
    )
    for name in ("", "turn", "run/session", "model", "profile", "turns", "cost"):
        right = name in ("turn", "turns", "cost")
        table.add_column(name, justify="right" if right else "left", no_wrap=name != "model")
    table.add_column("outcome", overflow="fold")
    for i, fork in enumerate(forks):
        if i:
            table.add_section()
        for side, b in (("origin", fork.origin), ("fork", fork.fork)):
            table.add_row(
                side,
                str(fork.at_turn),
                f"{b.run_id}/{b.session_id}",
                b.model,
                b.profile,
                str(b.turns),
                usd(b.cost_usd),
                b.outcome or b.status,
            )
    return table


def _timings_table(runs: list[RunFigures]) -> Table:
    """Overhead percentiles and each phase's median, one row per run (per ladder tier)."""

    def phase(name: str) -> Callable[[RunFigures], str]:
        return lambda r: ms(r.timings.phases_ms[name].p50) if r.timings else "-"

    def overhead(q: str) -> Callable[[RunFigures], str]:
        return lambda r: ms(getattr(r.timings.overhead_ms, q)) if r.timings else "-"

    return _table(
        "turn timings",
        runs,
        {
            "run": lambda r: str(r.run_id),
            "tier": lambda r: r.tier,
            "timed turns": lambda r: str(r.timings.turns) if r.timings else "-",
            "overhead p50": overhead("p50"),
            "p95": overhead("p95"),
            "p99": overhead("p99"),
            **{p: phase(p) for p in ("queue", "claim", "rebuild", "tools", "commit", "dispatch")},
            "model": phase("model"),
            "CPU/turn": lambda r: ms(r.timings.cpu_ms.p50) if r.timings else "-",
            "duplicates": lambda r: str(r.timings.duplicate_turn_tasks) if r.timings else "-",
        },
        caption="overhead = every phase but the model call; phases and CPU are medians; "
        "duplicates = turn tasks sent again that found nothing to do",
    )


def _notes(run: RunFigures) -> list[str]:
    """The run's budget (spent, reserved, left) and forecast, why it stopped, and its
    cache-share alarm."""
    notes = []
    if run.budget is not None:
        notes.append(f"run {run.run_id} budget: {run.budget.describe()}")
    if run.forecast is not None and run.forecast.budget_usd is not None:
        notes.append(f"run {run.run_id} forecast: {run.forecast.describe()}")
    if run.stop_reason:
        notes.append(f"run {run.run_id} stopped: {run.stop_reason}")
    if run.cache_alarm is not None:
        notes.append(f"run {run.run_id} CACHE ALARM: {run.cache_alarm.describe()}")
    return notes


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
        title=arrow(ladder.baseline, ladder.candidate),
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


def _dollars(bucket: CostBucket) -> Callable[[RunFigures], str]:
    return lambda r: usd(r.dollars_by_outcome[bucket])


def _kinds(items: Iterable[tuple[str, int]]) -> str:
    return ", ".join(f"{k} {n}" for k, n in items) or "-"


def _no_idle(run: RunFigures) -> bool:
    return run.memory.sessions_peak_rss_bytes is not None and run.memory.idle_rss_bytes is None


def _idle(run: RunFigures, text: str, missing: str) -> str:
    """Say that idle samples are missing rather than show a bare dash."""
    return missing if _no_idle(run) else text


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"
