"""``scheduler diff RUN_A RUN_B``: two runs' figures side by side, with ratios."""

from __future__ import annotations

import json

import click
from rich import box
from rich.console import Console
from rich.table import Table

from scheduler.cli.services import OperatorError, open_store
from scheduler.report.diff import FigureDiff, diff_runs
from worker.errors import RunNotFound
from worker.models.pricing import PriceTable
from worker.reads.figures import RunFigures, run_figures
from worker.settings import Settings

__all__ = ["diff"]


def _run_id(text: str) -> int:
    try:
        run_id = int(text)
    except ValueError:
        raise OperatorError(f"run id {text!r} is not a number") from None
    if run_id < 1:
        raise OperatorError(f"run id {text!r} is not a run id (they start at 1)")
    return run_id


@click.command()
@click.argument("run_a", metavar="RUN_A")
@click.argument("run_b", metavar="RUN_B")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as one JSON object.")
@click.pass_obj
def diff(settings: Settings, run_a: str, run_b: str, as_json: bool) -> None:
    """Cost, $ per verified artifact, cache share, tool errors, turns per session and RSS
    of two runs side by side, with the ratio RUN_B / RUN_A."""
    ids = _run_id(run_a), _run_id(run_b)
    prices = PriceTable.load(settings.prices_file)
    with open_store(settings) as engine, engine.connect() as conn:
        try:
            a, b = (run_figures(conn, run_id, prices=prices) for run_id in ids)
        except RunNotFound as exc:
            raise OperatorError(
                f"{exc} (`python -m scheduler status` shows the latest run)"
            ) from None
    rows = diff_runs(a, b)
    if as_json:
        out = {
            "a": a.run_id,
            "b": b.run_id,
            "figures": {r.name: {"a": r.a, "b": r.b, "ratio": r.ratio} for r in rows},
        }
        click.echo(json.dumps(out, indent=2))
    else:
        Console().print(_table(a, b, rows))


def _table(a: RunFigures, b: RunFigures, rows: list[FigureDiff]) -> Table:
    def run(r: RunFigures) -> str:
        return f"run {r.run_id}"

    table = Table(
        title=f"{run(a)} ({a.waves_spec}, {a.model}, {a.profile}, {a.status.value}) against "
        f"{run(b)} ({b.waves_spec}, {b.model}, {b.profile}, {b.status.value})",
        title_justify="left",
        title_style="bold",
        box=box.SIMPLE_HEAD,
    )
    table.add_column("figure")
    for name in (run(a), run(b), f"{b.run_id} / {a.run_id}"):
        table.add_column(name, justify="right")
    for r in rows:
        table.add_row(r.label, r.a_text, r.b_text, "-" if r.ratio is None else f"{r.ratio:.2f}x")
    return table
