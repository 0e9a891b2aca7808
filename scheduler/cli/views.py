"""How a run looks in a terminal: the status table, a ladder's runs and the live progress bar.

Every view reads :class:`~worker.reads.figures.RunFigures`, the figures ``report`` reads.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console, Group
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from scheduler.report.format import clock, jsonable, ms
from worker.reads.figures import RunFigures
from worker.reads.queries import SessionRow
from worker.reads.tasks import TaskFigures
from worker.reads.timings import TurnTimings
from worker.states import SessionStatus, WaveStatus

if TYPE_CHECKING:
    from worker.models.limiter.base import LimiterState

__all__ = ["SHOWN_STATES", "RunProgress", "ladder_view", "print_status", "status_view"]

#: Session states shown in the summary line, in this order.
SHOWN_STATES = (
    SessionStatus.succeeded,
    SessionStatus.failed,
    SessionStatus.stopped,
    SessionStatus.cancelled,
    SessionStatus.error,
    SessionStatus.running,
    SessionStatus.verifying,
    SessionStatus.pending,
)


def print_status(
    figures: RunFigures,
    *,
    as_json: bool,
    limiter: LimiterState | str | None = None,
    session_list: Sequence[SessionRow] | None = None,
) -> None:
    """Print a run's status on stdout: :func:`status_view`, or its figures as JSON.

    The limiter's state and the session list, when given, are extra keys of the JSON object.
    """
    if not as_json:
        Console().print(status_view(figures, limiter=limiter, session_list=session_list))
        return
    out = jsonable(figures)
    if isinstance(limiter, str):
        out["limiter"] = {"model": figures.model, "error": limiter}
    elif limiter is not None:
        out["limiter"] = jsonable(limiter)
    if session_list is not None:
        out["session_list"] = jsonable(session_list)
    click.echo(json.dumps(out, indent=2))


def status_view(
    figures: RunFigures,
    *,
    limiter: LimiterState | str | None = None,
    session_list: Sequence[SessionRow] | None = None,
) -> Group:
    """A run's status as rich renderables: a summary table, the waves, and the sessions.

    Args:
        figures: The run's figures.
        limiter: The fleet limiter's state for the run's model, or why it is unknown.
        session_list: With ``--sessions``: one row per session.
    """
    f, sessions = figures, figures.sessions
    summary = Table.grid(padding=(0, 2))
    summary.add_column(style="bold")
    summary.add_column()
    summary.add_row(
        "run",
        f"{f.run_id}  {f.status.value}  ({f.waves_spec}, model {f.model}, profile {f.profile})",
    )
    summary.add_row(
        "sessions",
        f"{sessions.total} total: "
        + ", ".join(f"{sessions.count(s)} {s.value}" for s in SHOWN_STATES if sessions.count(s)),
    )
    art = f.artifacts
    by = ", ".join(f"{n} {method}" for method, n in art.verified_by.items())
    summary.add_row(
        "artifacts",
        f"{art.total} ({art.versions} versions, {art.verified} verified"
        + (f": {by})" if by else ")"),
    )
    if f.task is not None:
        summary.add_row("task", task_line(f.task))
    summary.add_row("tool errors", _counted(f.tool_errors.total, f.tool_errors.by_kind))
    summary.add_row("nudges", _counted(f.nudges.total, f.nudges.by_reason))
    t = f.tokens
    summary.add_row(
        "tokens",
        f"{t.total:,} (prompt {t.prompt:,}, cached {t.cached:,}, output {t.output:,}, "
        f"thoughts {t.thoughts:,})",
    )
    summary.add_row("turns / cost", f"{f.turns} turns, ${f.cost_usd:.4f}")
    if f.budget is not None:
        summary.add_row("budget", f.budget.describe())
    if f.cache_token_hours:
        summary.add_row(
            "cache storage",
            f"${f.cache_storage_usd:.4f} ({f.cache_token_hours:,.0f} token-hours); "
            f"total ${f.total_usd:.4f}",
        )
    summary.add_row("model retries", str(f.retries))
    if f.timings is not None:
        summary.add_row("turn overhead", overhead_line(f.timings))
    if f.elapsed_s is not None:
        summary.add_row("elapsed", f"{f.elapsed_s:.1f} s")
    if f.stop_reason:
        summary.add_row("stopped", f.stop_reason)
    if f.ended_in_error:
        summary.add_row(
            "ended in error",
            "\n".join(e.describe() for e in f.ended_in_error),
        )
    if f.forecast is not None:
        summary.add_row("forecast", f.forecast.describe())
    if f.cache_alarm is not None:
        summary.add_row("cache alarm", f"[bold red]{f.cache_alarm.describe()}[/]")
    if f.ladder_id is not None:
        summary.add_row("ladder", f"L{f.ladder_id}, tier {f.tier}")
    if limiter is not None:
        summary.add_row("limiter", _limiter(limiter))
    waves = Table("wave", "size", "status", "done", "started", "finished", box=None)
    for w in f.waves:
        waves.add_row(
            str(w.index),
            str(w.size),
            w.status.value,
            str(w.done),
            clock(w.started_at),
            clock(w.finished_at),
        )
    if session_list is None:
        return Group(summary, waves)
    table = Table(
        "session",
        "wave",
        "persona",
        "status",
        "outcome",
        "turns",
        "versions",
        "errors",
        "cost",
        "instance",
        box=None,
    )
    for row in session_list:
        table.add_row(
            str(row.index),
            str(row.wave),
            row.persona,
            row.status.value,
            row.outcome.value if row.outcome is not None else "-",
            str(row.turns),
            str(row.versions),
            str(row.errors),
            f"${row.cost_usd:.4f}",
            row.instance,
        )
    return Group(summary, waves, table)


def ladder_view(runs: Sequence[RunFigures]) -> Table:
    """One line per run of a ladder: profile, tier, sessions, turns, cost, time."""
    table = Table(
        "run",
        "profile",
        "tier",
        "succeeded",
        "stopped",
        "failed",
        "turns",
        "cost",
        "elapsed",
        box=None,
    )
    for f in runs:
        s = f.sessions
        table.add_row(
            str(f.run_id),
            f.profile,
            f.tier,
            f"{s.succeeded}/{s.total}",
            str(s.stopped),
            str(s.failed + s.error),
            str(f.turns),
            f"${f.cost_usd:.4f}",
            f"{f.elapsed_s:.1f} s" if f.elapsed_s is not None else "-",
        )
    return table


def task_line(t: TaskFigures) -> str:
    """A run's score on its task, in one line."""
    rate = "-" if t.pass_rate is None else f"{t.pass_rate:.0%}"
    at_k = "".join(f", pass@{k} {v:.0%}" for k, v in t.pass_at_k.items())
    dollars = "" if t.usd_per_solved is None else f", ${t.usd_per_solved:.4f}/solved"
    turns = "" if t.turns_per_solve is None else f", {t.turns_per_solve:.1f} turns/solve"
    return (
        f"{t.name} {t.version}: {t.passed}/{t.ended} passed ({rate}{at_k}); "
        f"{t.solved}/{t.instances} instances solved{dollars}{turns}"
    )


def overhead_line(t: TurnTimings) -> str:
    """The ledger in one line: overhead percentiles, its largest phases, CPU, duplicates."""
    if not t.turns:
        return f"no timed turn yet; {t.duplicate_turn_tasks} duplicate turn tasks"
    o = t.overhead_ms
    phases = ", ".join(
        f"{p} {ms(t.phases_ms[p].p50)}" for p in ("queue", "claim", "rebuild", "tools", "commit")
    )
    if t.reserve_cpu_ms.p50 is not None:
        phases += (
            f", reserve {ms(t.phases_ms['reserve'].p50)} "
            f"(CPU p50 {ms(t.reserve_cpu_ms.p50)}, p99 {ms(t.reserve_cpu_ms.p99)})"
        )
    return (
        f"p50 {ms(o.p50)}, p95 {ms(o.p95)}, p99 {ms(o.p99)} over {t.turns} turns "
        f"(p50 {phases}; model p50 {ms(t.phases_ms['model'].p50)}); "
        f"worker CPU/turn p50 {ms(t.cpu_ms.p50)}; "
        f"{t.duplicate_turn_tasks} duplicate turn tasks"
    )


def _counted(total: int, by: dict[str, int]) -> str:
    kinds = ", ".join(f"{k} {n}" for k, n in by.items())
    return f"{total}" + (f" ({kinds})" if kinds else "")


def _limiter(state: LimiterState | str) -> str:
    if isinstance(state, str):
        return state
    text = (
        f"{state.in_flight} in flight of {state.concurrency_limit} "
        f"(max {state.max_concurrency}), {state.requests_in_window}/"
        f"{state.requests_per_minute} requests and {state.tokens_in_window:,}/"
        f"{state.tokens_per_minute:,} tokens in the last minute"
    )
    if state.cooldown_until is not None:
        text += f", cooling down until {clock(state.cooldown_until)}"
    if state.paused is not None:
        until = state.paused.until.isoformat(timespec="seconds")
        text += f", paused until {until}: {state.paused.reason}"
    return text


def _progress_note(figures: RunFigures) -> str:
    """What the budget holds and leaves, the forecast's upper bound against it, and the
    cache alarm, if any."""
    note = ""
    b = figures.budget
    if b is not None:
        note += f"  reserved ${b.reserved_usd:.4f}  left ${b.left_usd:.4f}"
    f = figures.forecast
    if f is not None and f.budget_usd is not None:
        note += f"  forecast ${f.projected_usd:.4f} (<= ${f.high_usd:.4f} of ${f.budget_usd:.4f})"
    if figures.cache_alarm is not None:
        note += f"  [bold red]CACHE ALARM from turn {figures.cache_alarm.turn}[/]"
    return note


class RunProgress:
    """A live progress bar of sessions ended, refreshed from the run's figures."""

    def __init__(self, console: Console) -> None:
        self._progress = Progress(
            TextColumn("[bold]run {task.fields[run]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(
                "wave {task.fields[wave]}  ok {task.fields[ok]}  "
                "bad {task.fields[bad]}  ${task.fields[cost]:.4f}{task.fields[note]}"
            ),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self._task: Any = None
        self._errors_shown: dict[tuple[str, str], int] = {}

    def __enter__(self) -> Callable[[RunFigures], None]:
        self._progress.start()
        return self.update

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def update(self, figures: RunFigures) -> None:
        """Show a new snapshot."""
        sessions = figures.sessions
        running = [w.index for w in figures.waves if w.status is WaveStatus.running]
        done_waves = sum(1 for w in figures.waves if w.status is WaveStatus.finished)
        fields: dict[str, Any] = {
            "run": figures.run_id,
            "wave": f"{running[0] if running else done_waves}/{len(figures.waves)}",
            "ok": sessions.succeeded,
            "bad": sessions.ended - sessions.succeeded,
            "cost": figures.cost_usd,
            "note": _progress_note(figures),
        }
        if self._task is None:
            self._task = self._progress.add_task("run", total=sessions.total, **fields)
        self._progress.update(self._task, completed=sessions.ended, **fields)
        self._say_errors(figures)

    def _say_errors(self, figures: RunFigures) -> None:
        # Why sessions ended in error is said as soon as it is known, above the bar, once
        # per reason (again only when its count has doubled): a fleet's scheduler cannot see
        # the workers' environment, so a missing key shows here first.
        for e in figures.ended_in_error:
            key = (e.outcome, e.reason)
            shown = self._errors_shown.get(key, 0)
            if e.sessions >= max(1, 2 * shown):
                self._errors_shown[key] = e.sessions
                plural = "" if e.sessions == 1 else "s"
                self._progress.console.print(
                    f"[red]{e.sessions} session{plural} ended in error ({e.outcome}):[/] "
                    f"{escape(e.reason)}"
                )
