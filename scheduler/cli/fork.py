"""``scheduler fork SESSION --at-turn N``: continue a session's history live in a new run.

The work is :func:`worker.runs.fork.create_fork`. With the embedded default the fork
runs in this process, as ``run`` does; with a broker the workers run it, as ``enqueue``.
"""

from __future__ import annotations

import json
import sys
from contextlib import nullcontext

import click
from rich.console import Console

from scheduler.cli.embedded import embedded_worker
from scheduler.cli.follow import DEFAULT_STALL_AFTER_S, until_finished
from scheduler.cli.services import (
    EXIT_OK,
    EXIT_RUN_INCOMPLETE,
    OperatorError,
    check_broker,
    open_runtime,
    send_or_raise,
)
from scheduler.cli.tasks import refuse_unready_model
from scheduler.report.format import jsonable
from scheduler.report.text import fork_table
from worker.celery import create_app
from worker.errors import ConfigError, InputError
from worker.models.pricing import PriceTable
from worker.models.registry import check_model
from worker.profiles import PROFILES
from worker.reads.figures import RunFigures
from worker.runs.fork import Fork, create_fork
from worker.settings import Settings
from worker.store.engine import migrate, utcnow
from worker.store.waves import take_outbox

__all__ = ["fork"]


@click.command()
@click.argument("session_id", metavar="SESSION", type=int)
@click.option(
    "--at-turn",
    type=click.IntRange(min=0),
    required=True,
    help="The fork's first live turn: it keeps the session's turns 0 to N-1.",
)
@click.option("--model", help="Model of the fork [default: the session's].")
@click.option(
    "--profile", type=click.Choice(sorted(PROFILES)), help="Profile [default: the session's]."
)
@click.option("--brief-note", help="A note the agent reads as the fork goes live.")
@click.option(
    "--follow/--no-follow",
    default=None,
    help="Wait for the fork to end and show it next to its origin "
    "[default: with the embedded default; always in that case].",
)
@click.option(
    "--stall-after-s",
    type=click.FloatRange(min=0),
    default=DEFAULT_STALL_AFTER_S,
    show_default=True,
    help="With --follow on a fleet: exit (code 5) when no worker claims the fork's work.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the fork's figures as JSON.")
@click.pass_obj
def fork(
    settings: Settings,
    session_id: int,
    at_turn: int,
    model: str | None,
    profile: str | None,
    brief_note: str | None,
    follow: bool | None,
    stall_after_s: float,
    as_json: bool,
) -> None:
    """Start a new run whose session is SESSION's history up to turn N (its artifacts and
    plan as they were then), and play it on from turn N live."""
    prices = PriceTable.load(settings.prices_file)
    if model is not None:
        try:
            check_model(model, prices)
        except ConfigError as exc:
            raise OperatorError(str(exc)) from None
    embedded = settings.is_embedded
    if embedded:
        if model is not None:
            refuse_unready_model(model, settings)
        migrate(settings.database_url)
    app = create_app(settings)
    with open_runtime(app) as rt:
        if not embedded:
            check_broker(app, settings)
        with embedded_worker(app, concurrency=1) if embedded else nullcontext():
            try:
                with rt.engine.begin() as conn:
                    made = create_fork(
                        conn,
                        session_id=session_id,
                        at_turn=at_turn,
                        now=utcnow(),
                        model=model,
                        profile=profile,
                        note=brief_note,
                    )
            except InputError as exc:
                raise OperatorError(str(exc)) from None
            # The fork's one session starts as any run's wave 1 does, through its outbox row.
            with rt.engine.begin() as conn:
                due = take_outbox(conn, now=rt.clock(), run_id=made.run_id)
            send_or_raise(rt.dispatcher, due, run_id=made.run_id)
            click.echo(_created(made), err=as_json)
            if not (embedded or follow):
                return
            figures = until_finished(
                rt.engine,
                made.run_id,
                show=not as_json,
                prices=rt.prices,
                stall_after_s=None if embedded else stall_after_s or None,
            )
    _show(figures, as_json=as_json)
    complete = figures.sessions.succeeded == figures.sessions.total
    sys.exit(EXIT_OK if complete else EXIT_RUN_INCOMPLETE)


def _created(made: Fork) -> str:
    return (
        f"run {made.run_id}: fork of session {made.origin_session_id} (run "
        f"{made.origin_run_id}) at turn {made.at_turn}, session {made.session_id}; "
        "wave 1 dispatched"
    )


def _show(figures: RunFigures, *, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(jsonable(figures), indent=2))
        return
    Console().print(fork_table(figures.forks))
