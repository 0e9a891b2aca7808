"""``scheduler report RUN_OR_LADDER``: what a run or a ladder cost and did.

The figures come from :mod:`worker.reads.ladders`; this command prints them as rich
tables (:mod:`scheduler.report.text`) or JSON, and has :mod:`scheduler.report.html` write the
page for ``--html``.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console

from scheduler.cli.services import open_store
from scheduler.report.format import jsonable
from scheduler.report.text import report_view
from worker.errors import InputError, RunNotFound
from worker.models.pricing import PriceTable
from worker.reads.ladders import Target, figures_for, runs_of
from worker.settings import Settings

__all__ = ["parse_target", "report"]


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
    help="Also write an HTML report (charts, gallery) to PATH, with the full-size "
    "screenshots and videos of its gallery, and a transcript page per session, in PATH's "
    "_files directory beside it.",
)
@click.pass_obj
def report(settings: Settings, target: Target, as_json: bool, html_path: Path | None) -> None:
    """Cost, errors, memory, tokens and outcomes of a run (12) or a ladder (L3)."""
    prices = PriceTable.load(settings.prices_file)
    with open_store(settings) as engine, engine.connect() as conn:
        try:
            figures = figures_for(conn, target, prices=prices)
        except RunNotFound as exc:
            raise click.BadParameter(str(exc), param_hint="RUN_OR_LADDER") from None
        if html_path is not None:
            # Imported here: matplotlib and Jinja2 load only when a page is asked for.
            from scheduler.report.gallery import write_assets
            from scheduler.report.html import load_details, render_html
            from scheduler.report.transcript import write_transcripts

            details = load_details(conn, runs_of(figures))
            try:
                details = write_assets(conn, details, html_path)
                details = write_transcripts(conn, details, html_path)
            except OSError as exc:
                raise click.FileError(str(html_path), hint=exc.strerror or str(exc)) from None
            page = render_html(figures, details)
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
