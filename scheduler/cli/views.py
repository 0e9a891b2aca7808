"""How a run looks in a terminal: the status table and the live progress bar."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import Console, Group
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

#: Session states shown in the summary line, in this order.
SHOWN_STATES = (
    "succeeded",
    "failed",
    "stopped",
    "cancelled",
    "error",
    "running",
    "verifying",
    "pending",
)


def status_view(status: dict[str, Any]) -> Group:
    """A run's status as rich renderables: a summary table and the waves."""
    sessions = status["sessions"]
    summary = Table.grid(padding=(0, 2))
    summary.add_column(style="bold")
    summary.add_column()
    summary.add_row(
        "run",
        f"{status['run']}  {status['status']}  ({status['waves_spec']}, "
        f"model {status['model']}, profile {status['profile']})",
    )
    summary.add_row(
        "sessions",
        f"{sessions['total']} total: "
        + ", ".join(f"{sessions[s]} {s}" for s in SHOWN_STATES if sessions[s]),
    )
    art = status["artifacts"]
    by = ", ".join(f"{n} {method}" for method, n in sorted(art["verified_by"].items()))
    summary.add_row(
        "artifacts",
        f"{art['total']} ({art['versions']} versions, "
        f"{art['verified']} verified" + (f": {by})" if by else ")"),
    )
    errors = status["tool_errors"]
    kinds = ", ".join(f"{k} {v}" for k, v in errors["by_kind"].items())
    summary.add_row("tool errors", f"{errors['total']}" + (f" ({kinds})" if kinds else ""))
    tokens = status["tokens"]
    summary.add_row(
        "tokens",
        f"{tokens['total']:,} (prompt {tokens['prompt']:,}, cached "
        f"{tokens['cached']:,}, output {tokens['output']:,}, thoughts "
        f"{tokens['thoughts']:,})",
    )
    summary.add_row("turns / cost", f"{status['turns']} turns, ${status['cost_usd']:.4f}")
    if status["elapsed_s"] is not None:
        summary.add_row("elapsed", f"{status['elapsed_s']:.1f} s")
    if status.get("stop_reason"):
        summary.add_row("stopped", status["stop_reason"])
    if status.get("ladder") is not None:
        summary.add_row("ladder", f"L{status['ladder']}, tier {status['tier']}")
    if "limiter" in status:
        summary.add_row("limiter", _limiter(status["limiter"]))
    waves = Table("wave", "size", "status", "done", "started", "finished", box=None)
    for w in status["waves"]:
        waves.add_row(
            str(w["index"]),
            str(w["size"]),
            w["status"],
            str(w["done"]),
            _clock(w["started_at"]),
            _clock(w["finished_at"]),
        )
    if "session_list" not in status:
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
        box=None,
    )
    for row in status["session_list"]:
        table.add_row(
            str(row["index"]),
            str(row["wave"]),
            row["persona"],
            row["status"],
            row["outcome"] or "-",
            str(row["turns"]),
            str(row["versions"]),
            str(row["errors"]),
            f"${row['cost_usd']:.4f}",
        )
    return Group(summary, waves, table)


def ladder_view(statuses: list[dict[str, Any]]) -> Table:
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
    for s in statuses:
        sessions = s["sessions"]
        table.add_row(
            str(s["run"]),
            s["profile"],
            s["tier"] or s["waves_spec"],
            f"{sessions['succeeded']}/{sessions['total']}",
            str(sessions["stopped"]),
            str(sessions["failed"] + sessions["error"]),
            str(s["turns"]),
            f"${s['cost_usd']:.4f}",
            f"{s['elapsed_s']:.1f} s" if s["elapsed_s"] is not None else "-",
        )
    return table


def _limiter(state: dict[str, Any]) -> str:
    if "error" in state:
        return str(state["error"])
    text = (
        f"{state['in_flight']} in flight of {state['concurrency_limit']} "
        f"(max {state['max_concurrency']}), {state['requests_in_window']}/"
        f"{state['requests_per_minute']} requests and {state['tokens_in_window']:,}/"
        f"{state['tokens_per_minute']:,} tokens in the last minute"
    )
    if state["cooldown_until"]:
        text += f", cooling down until {_clock(state['cooldown_until'])}"
    if state["paused"]:
        text += f", paused until {state['paused']['until']}: {state['paused']['reason']}"
    return text


def _clock(iso: str | None) -> str:
    return iso[11:23] if iso else "-"


class RunProgress:
    """A live progress bar of sessions ended, refreshed from status snapshots."""

    def __init__(self, console: Console) -> None:
        self._progress = Progress(
            TextColumn("[bold]run {task.fields[run]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(
                "wave {task.fields[wave]}  ok {task.fields[ok]}  "
                "bad {task.fields[bad]}  ${task.fields[cost]:.4f}"
            ),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self._task: Any = None

    def __enter__(self) -> Callable[[dict[str, Any]], None]:
        self._progress.start()
        return self.update

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def update(self, status: dict[str, Any]) -> None:
        """Show a new snapshot."""
        sessions = status["sessions"]
        running = [w["index"] for w in status["waves"] if w["status"] == "running"]
        done_waves = sum(1 for w in status["waves"] if w["status"] == "finished")
        fields = {
            "run": status["run"],
            "wave": f"{running[0] if running else done_waves}/{len(status['waves'])}",
            "ok": sessions["succeeded"],
            "bad": sessions["ended"] - sessions["succeeded"],
            "cost": status["cost_usd"],
        }
        if self._task is None:
            self._task = self._progress.add_task("run", total=sessions["total"], **fields)
        self._progress.update(self._task, completed=sessions["ended"], **fields)
