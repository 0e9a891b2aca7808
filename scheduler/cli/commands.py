"""``python -m scheduler``: migrate, enqueue, run (embedded), ladder, status, report, show,
serve, cancel, resume, replay, fork, diff, tasks, task check."""

from __future__ import annotations

import json
import logging.config
import sys
from contextlib import nullcontext
from typing import Any

import click
import kombu.exceptions
import redis
import sqlalchemy.exc
from pydantic import ValidationError
from rich.console import Console

from scheduler.cli.diff import diff
from scheduler.cli.embedded import embedded_worker
from scheduler.cli.follow import DEFAULT_STALL_AFTER_S, until_finished
from scheduler.cli.fork import fork
from scheduler.cli.options import LadderRequest, RunRequest, run_options
from scheduler.cli.replay import replay
from scheduler.cli.report import report
from scheduler.cli.serve import serve
from scheduler.cli.services import (
    EXIT_OK,
    EXIT_RUN_INCOMPLETE,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    OperatorError,
    ServiceUnavailable,
    check_broker,
    database_error,
    open_runtime,
    open_store,
    safe_url,
    send_or_raise,
    settings_error,
)
from scheduler.cli.show import show
from scheduler.cli.tasks import refuse_unready_model, refuse_without_sandbox, task_group, tasks
from scheduler.cli.views import ladder_view, print_status
from scheduler.report.format import jsonable
from worker.celery import create_app
from worker.config import WaveSpec
from worker.errors import SwarmError
from worker.models.pricing import PriceTable
from worker.models.registry import GEMINI_PREFIX, Providers
from worker.reads.figures import RunFigures, run_figures
from worker.reads.ladders import Target
from worker.reads.queries import latest_run_id, session_rows
from worker.settings import DEFAULT_BROKER_URL, DEFAULT_DATABASE_URL, Settings
from worker.store.control import cancel_ladder, cancel_run, resume_run
from worker.store.endings import count_endings
from worker.store.engine import make_engine, migrate, utcnow
from worker.store.roles import VERIFY_ROLE, enable_verify_login
from worker.tasks.registry import load_task

__all__ = ["EXIT_OK", "EXIT_RUN_INCOMPLETE", "EXIT_UNAVAILABLE", "EXIT_USAGE", "cli", "main"]

logger = logging.getLogger(__name__)


def _configure_logging(verbose: int) -> None:
    level = ("WARNING", "INFO", "DEBUG")[min(verbose, 2)]
    logging.config.dictConfig(
        {
            "version": 1,
            "disable_existing_loggers": False,
            "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
            "handlers": {
                "stderr": {
                    "class": "logging.StreamHandler",
                    "formatter": "plain",
                    "stream": "ext://sys.stderr",
                }
            },
            "root": {"level": level, "handlers": ["stderr"]},
        }
    )


class SwarmGroup(click.Group):
    """Says in one line why a service could not be used, for every command."""

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; a database or broker failure becomes an :class:`OperatorError`."""
        try:
            return super().invoke(ctx)
        except sqlalchemy.exc.OperationalError as exc:
            settings = ctx.find_object(Settings)
            if settings is None:
                raise
            raise database_error(exc, settings.database_url) from None
        except (kombu.exceptions.OperationalError, redis.RedisError) as exc:
            settings = ctx.find_object(Settings)
            where = safe_url(settings.broker_url) if settings is not None else "the broker"
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ServiceUnavailable(
                f"broker {where} unreachable ({first}): start Redis or fix SWARM_BROKER_URL"
            ) from None


@click.group(cls=SwarmGroup)
@click.option(
    "--database-url",
    envvar="SWARM_DATABASE_URL",
    help="SQLAlchemy URL [env SWARM_DATABASE_URL; default: the embedded SQLite file swarm.db].",
)
@click.option(
    "--broker-url", envvar="SWARM_BROKER_URL", help="Celery broker URL [env SWARM_BROKER_URL]."
)
@click.option("-v", "--verbose", count=True, help="Log more (-v info, -vv debug).")
@click.pass_context
def cli(ctx: click.Context, database_url: str | None, broker_url: str | None, verbose: int) -> None:
    """Run fleets of agent sessions in waves and see what they cost."""
    _configure_logging(verbose)
    overrides = {k: v for k, v in (("database_url", database_url), ("broker_url", broker_url)) if v}
    try:
        ctx.obj = Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise settings_error(exc) from None


def _exit_code(figures: RunFigures) -> int:
    sessions = figures.sessions
    return EXIT_OK if sessions.succeeded == sessions.total else EXIT_RUN_INCOMPLETE


@cli.command("migrate")
@click.pass_obj
def migrate_cmd(settings: Settings) -> None:
    """Bring the configured database to the latest schema revision."""
    migrate(settings.database_url)
    click.echo(f"database at the latest revision ({safe_url(settings.database_url)})")
    if settings.verify_database_url and settings.verify_database_url != settings.database_url:
        _enable_verify_login(settings)


def _enable_verify_login(settings: Settings) -> None:
    engine = make_engine(settings)
    try:
        if enable_verify_login(engine, settings.verify_database_url or ""):
            click.echo(f"role {VERIFY_ROLE} may log in with SWARM_VERIFY_DATABASE_URL's password")
    finally:
        engine.dispose()


@cli.command()
@run_options()
@click.option("--follow", is_flag=True, help="Show a live progress bar until the run ends.")
@click.option(
    "--stall-after-s",
    type=click.FloatRange(min=0),
    default=DEFAULT_STALL_AFTER_S,
    show_default=True,
    help="With --follow: exit (code 5) when sessions wait and no worker has claimed any "
    "work of the run for this long; the run stays queued. 0 waits for ever.",
)
@click.pass_obj
def enqueue(
    settings: Settings, request: RunRequest, as_json: bool, follow: bool, stall_after_s: float
) -> None:
    """Create a run and dispatch its first wave to the workers."""
    app = create_app(settings)
    with open_runtime(app) as rt:
        # Refuse before anything is created, rather than leave a run nobody was sent.
        check_broker(app, settings)
        run_id = request.create(rt)
        config = request.config
        click.echo(
            f"run {run_id}: {config.waves} ({WaveSpec.parse(config.waves).total} "
            f"sessions), model {request.model}, profile {request.profile}, seed "
            f"{config.seed}; wave 1 dispatched",
            err=as_json,
        )
        if not follow:
            return
        figures = until_finished(
            rt.engine,
            run_id,
            show=not as_json,
            prices=rt.prices,
            stall_after_s=stall_after_s or None,
        )
    print_status(figures, as_json=as_json)
    sys.exit(_exit_code(figures))


@cli.command()
@run_options()
@click.option(
    "--database",
    default=DEFAULT_DATABASE_URL,
    show_default=True,
    help="The embedded SQLite database.",
)
@click.pass_obj
def run(settings: Settings, request: RunRequest, as_json: bool, database: str) -> None:
    """Run a swarm in this process: no Redis or PostgreSQL needed."""
    try:
        database_url = Settings(database_url=database).database_url
    except ValidationError as exc:
        raise settings_error(exc, option="--database") from None
    embedded = settings.model_copy(
        update={"database_url": database_url, "broker_url": DEFAULT_BROKER_URL}
    )
    # The embedded worker judges every kind (a Python task needs its sandbox here) and calls
    # the model itself: what either needs is checked before anything is made.
    refuse_without_sandbox(load_task(request.task), embedded)
    refuse_unready_model(request.model, embedded)
    try:
        migrate(embedded.database_url)
    except sqlalchemy.exc.OperationalError as exc:
        raise database_error(exc, embedded.database_url) from None
    app = create_app(embedded)
    rt = app.runtime
    size = WaveSpec.parse(request.config.waves).size
    try:
        with embedded_worker(app, concurrency=min(size, 100)):
            run_id = request.create(rt)
            figures = until_finished(rt.engine, run_id, show=not as_json, prices=rt.prices)
    finally:
        rt.engine.dispose()
    print_status(figures, as_json=as_json)
    sys.exit(_exit_code(figures))


@cli.command()
@run_options(ladder=True)
@click.option(
    "--detach",
    is_flag=True,
    help="Dispatch the first tier to the workers and "
    "return (with a broker; the tiers still run one after the other).",
)
@click.pass_obj
def ladder(settings: Settings, request: LadderRequest, as_json: bool, detach: bool) -> None:
    """Run the tiers one after the other, once per profile, and compare them.

    With the embedded default (no broker configured) the ladder runs in this process;
    with a broker the workers run it and this command follows it.
    """
    embedded = settings.is_embedded
    if embedded:
        refuse_without_sandbox(load_task(request.task), settings)
        refuse_unready_model(request.model, settings)
        migrate(settings.database_url)
    app = create_app(settings)
    size = max(WaveSpec.parse(t).size for t in request.tiers)
    with open_runtime(app) as rt:
        if not embedded:
            check_broker(app, settings)
        with embedded_worker(app, concurrency=min(size, 100)) if embedded else nullcontext():
            ladder_id, run_ids = request.create(rt)
            click.echo(
                f"ladder L{ladder_id}: {len(request.tiers)} tiers "
                f"({', '.join(request.tiers)}) x {len(request.profiles)} profiles "
                f"({', '.join(request.profiles)}), model {request.model}, seed "
                f"{request.config.seed}",
                err=as_json,
            )
            if detach and not embedded:
                return
            figures = [
                until_finished(rt.engine, run_id, show=not as_json, prices=rt.prices)
                for run_id in run_ids
            ]
    if as_json:
        click.echo(json.dumps({"ladder": ladder_id, "runs": jsonable(figures)}, indent=2))
    else:
        Console().print(ladder_view(figures))
        click.echo(f"figures: python -m scheduler report L{ladder_id} [--html report.html]")
    incomplete = any(_exit_code(f) != EXIT_OK for f in figures)
    sys.exit(EXIT_RUN_INCOMPLETE if incomplete else EXIT_OK)


@cli.command()
@click.argument("run_id", required=False, type=int)
@click.option("--sessions", "with_sessions", is_flag=True, help="List every session too.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_obj
def status(settings: Settings, run_id: int | None, with_sessions: bool, as_json: bool) -> None:
    """Show a run's waves, sessions, artifacts, errors, tokens and cost (default: latest)."""
    prices = PriceTable.load(settings.prices_file)
    with open_store(settings) as engine, engine.connect() as conn:
        run_id = run_id if run_id is not None else latest_run_id(conn)
        if run_id is None:
            raise click.ClickException("no runs yet")
        figures = run_figures(conn, run_id, prices=prices)
        rows = session_rows(conn, run_id) if with_sessions else None
    limiter = (
        Providers(settings).limiter_status(figures.model)
        if figures.model.startswith(GEMINI_PREFIX) and not settings.is_embedded
        else None
    )
    print_status(figures, as_json=as_json, limiter=limiter, session_list=rows)


@cli.command()
@click.argument("run_or_ladder")
@click.pass_obj
def cancel(settings: Settings, run_or_ladder: str) -> None:
    """Cancel a run (12) or a ladder (L3): no new turn, wave or tier starts; turns in flight
    finish and are recorded."""
    target = Target.parse(run_or_ladder)
    with open_store(settings) as engine:
        with engine.begin() as conn:
            if target.kind == "ladder":
                done = cancel_ladder(conn, ladder_id=target.id, now=utcnow())
            else:
                done = cancel_run(conn, run_id=target.id, now=utcnow())
        # The sessions it ended count on their waves, which the last of them closes.
        count_endings(engine, now=utcnow())
    what = f"ladder {target}" if target.kind == "ladder" else f"run {target}"
    click.echo(
        f"{what} cancelled: {done.ended} sessions ended now, {done.in_flight} "
        "end after the turn they have in flight"
    )


@cli.command()
@click.argument("run_id", type=int)
@click.pass_obj
def resume(settings: Settings, run_id: int) -> None:
    """Dispatch again every session of a run that has not ended (after an outage, a cancel)."""
    app = create_app(settings)
    with open_runtime(app) as rt:
        check_broker(app, settings)
        with rt.engine.begin() as conn:
            dispatches = resume_run(conn, run_id=run_id, now=utcnow())
        sent = send_or_raise(rt.dispatcher, dispatches, run_id=run_id)
    turns = sum(1 for d in dispatches if d.kind == "turn")
    click.echo(
        f"run {run_id} resumed: {turns} turns and {len(dispatches) - turns} "
        f"verifications dispatched ({sent} sent)"
    )


cli.add_command(report)
cli.add_command(show)
cli.add_command(serve)
cli.add_command(tasks)
cli.add_command(task_group)
cli.add_command(replay)
cli.add_command(fork)
cli.add_command(diff)


def main() -> None:
    """Entry point: map project errors to clear messages and exit codes."""
    try:
        cli(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(EXIT_RUN_INCOMPLETE)
    except OperatorError as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(EXIT_USAGE)
    except SwarmError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    except SystemExit:
        raise
    except (OSError, sqlalchemy.exc.OperationalError, kombu.exceptions.OperationalError) as exc:
        click.echo(f"error: a service is unreachable: {str(exc).splitlines()[0]}", err=True)
        sys.exit(EXIT_UNAVAILABLE)
