"""``python -m scheduler``: migrate, enqueue, run (embedded), status, cancel, resume."""

from __future__ import annotations

import functools
import json
import logging.config
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click
import kombu.exceptions
import sqlalchemy.exc
from pydantic import ValidationError
from rich.console import Console
from sqlalchemy.engine import make_url

from scheduler.embedded import embedded_worker
from scheduler.follow import until_finished
from scheduler.views import status_view
from worker import create_app
from worker.control import cancel_run, resume_run
from worker.db import make_engine, migrate, require_migrated, utcnow
from worker.errors import SwarmError
from worker.pricing import PriceTable
from worker.profiles import DEFAULT_PROFILE, PROFILES
from worker.providers import GEMINI_PREFIX, Providers, check_model
from worker.runs import RunConfig, WaveSpec, create_run, parse_mix
from worker.runtime import Runtime
from worker.settings import DEFAULT_BROKER_URL, DEFAULT_DATABASE_URL, Settings
from worker.status import latest_run_id, run_status, session_rows

#: The command did what was asked.
EXIT_OK = 0
#: The run ended, but not every session succeeded.
EXIT_RUN_INCOMPLETE = 1
#: Bad input: options, ids, configuration.
EXIT_USAGE = 2
#: A service (database, broker) could not be used.
EXIT_UNAVAILABLE = 3

logger = logging.getLogger(__name__)


def _configure_logging(verbose: int) -> None:
    level = ("WARNING", "INFO", "DEBUG")[min(verbose, 2)]
    logging.config.dictConfig({
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "plain",
                                "stream": "ext://sys.stderr"}},
        "root": {"level": level, "handlers": ["stderr"]},
    })


@click.group()
@click.option("--database-url", envvar="SWARM_DATABASE_URL", help="SQLAlchemy URL "
              "[env SWARM_DATABASE_URL; default: the embedded SQLite file swarm.db].")
@click.option("--broker-url", envvar="SWARM_BROKER_URL",
              help="Celery broker URL [env SWARM_BROKER_URL].")
@click.option("-v", "--verbose", count=True, help="Log more (-v info, -vv debug).")
@click.pass_context
def cli(ctx: click.Context, database_url: str | None, broker_url: str | None,
        verbose: int) -> None:
    """Run fleets of agent sessions in waves and see what they cost."""
    _configure_logging(verbose)
    overrides = {k: v for k, v in (("database_url", database_url),
                                    ("broker_url", broker_url)) if v}
    ctx.obj = Settings(**overrides)  # type: ignore[arg-type]


@dataclass(frozen=True)
class RunRequest:
    """What ``enqueue`` and ``run`` were asked to create."""

    model: str
    profile: str
    config: RunConfig
    budget_usd: float | None = None

    def create(self, rt: Runtime) -> int:
        """Create the run and dispatch its first wave; returns the run id."""
        with rt.engine.begin() as conn:
            run_id = create_run(conn, model=self.model, config=self.config,
                                profile=self.profile, now=utcnow(), budget_usd=self.budget_usd)
        rt.flush_outbox(run_id)
        return run_id


def run_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Options shared by ``enqueue`` and ``run``, handed to ``fn`` as one ``request``."""

    @functools.wraps(fn)
    def wrapper(*args: Any, waves: str, model: str, profile: str, seed: int | None,
                max_turns: int, max_tokens: int | None, max_cost_usd: float | None,
                budget_usd: float | None, repair_rounds: int, sim_latency_ms: int, sim_mix: str,
                sim_flaw_rate: float, **kwargs: Any) -> Any:
        spec = WaveSpec.parse(waves)
        try:
            config = RunConfig(
                waves=str(spec), seed=seed if seed is not None else random.randrange(1 << 31),
                max_turns=max_turns, max_tokens=max_tokens, max_cost_usd=max_cost_usd,
                repair_rounds=repair_rounds, sim_latency_ms=sim_latency_ms,
                sim_mix=parse_mix(sim_mix), sim_flaw_rate=sim_flaw_rate)
        except ValidationError as exc:
            raise click.BadParameter("; ".join(e["msg"] for e in exc.errors())) from None
        settings = click.get_current_context().find_object(Settings)
        check_model(model, PriceTable.load(settings.prices_file if settings else None))
        return fn(*args, request=RunRequest(model, profile, config, budget_usd), **kwargs)

    options = [
        click.option("--wave", "waves", default="1x1", show_default=True,
                     help="N waves of M concurrent sessions, as NxM."),
        click.option("--model", default="sim", show_default=True,
                     help="'sim' (the offline stand-in) or a Gemini model, e.g. "
                          "gemini-3-flash-preview."),
        click.option("--profile", type=click.Choice(sorted(PROFILES)), default=DEFAULT_PROFILE,
                     show_default=True, help="Prompt contract and engine rules."),
        click.option("--seed", type=int, default=None,
                     help="Seed of briefs and sim behaviour [default: random]."),
        click.option("--max-turns", type=click.IntRange(min=1), default=40,
                     show_default=True, help="Turns after which a session is stopped."),
        click.option("--max-tokens", type=click.IntRange(min=1), default=None,
                     help="Tokens a session may spend before it is stopped."),
        click.option("--max-cost-usd", type=click.FloatRange(min=0, min_open=True),
                     default=None, help="Dollars a session may spend before it is stopped."),
        click.option("--budget-usd", type=click.FloatRange(min=0, min_open=True), default=None,
                     help="Dollars the whole run may spend; then no new turn starts and the "
                          "remaining sessions end stopped."),
        click.option("--repair-rounds", type=click.IntRange(min=0), default=2,
                     show_default=True, help="Verifier rejections a session may repair."),
        click.option("--sim-latency-ms", type=click.IntRange(min=0), default=1500,
                     show_default=True, help="Mean latency of one sim model call."),
        click.option("--sim-mix", default="diligent", show_default=True,
                     help="Sim personas and weights, e.g. diligent=3,sloppy=1,explorer,markdown."),
        click.option("--sim-flaw-rate", type=click.FloatRange(0, 1), default=0.0,
                     show_default=True, help="Share of sim first drafts with a defect."),
        click.option("--json", "as_json", is_flag=True, help="Print the status as JSON."),
    ]
    decorated: Callable[..., Any] = wrapper
    for option in reversed(options):
        decorated = option(decorated)
    return decorated


def _print_status(status: dict[str, Any], *, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(status, indent=2))
    else:
        Console().print(status_view(status))


def _exit_code(status: dict[str, Any]) -> int:
    sessions = status["sessions"]
    return EXIT_OK if sessions["succeeded"] == sessions["total"] else EXIT_RUN_INCOMPLETE


@cli.command("migrate")
@click.pass_obj
def migrate_cmd(settings: Settings) -> None:
    """Bring the configured database to the latest schema revision."""
    migrate(settings.database_url)
    click.echo(f"database at the latest revision ({_safe_url(settings.database_url)})")


@cli.command()
@run_options
@click.option("--follow", is_flag=True, help="Show a live progress bar until the run ends.")
@click.pass_obj
def enqueue(settings: Settings, request: RunRequest, as_json: bool, follow: bool) -> None:
    """Create a run and dispatch its first wave to the workers."""
    rt = create_app(settings).runtime
    try:
        require_migrated(rt.engine)
        run_id = request.create(rt)
        config = request.config
        click.echo(f"run {run_id}: {config.waves} ({WaveSpec.parse(config.waves).total} "
                   f"sessions), model {request.model}, profile {request.profile}, seed "
                   f"{config.seed}; wave 1 dispatched", err=as_json)
        if not follow:
            return
        status = until_finished(rt.engine, run_id, show=not as_json)
    finally:
        rt.engine.dispose()
    _print_status(status, as_json=as_json)
    sys.exit(_exit_code(status))


@cli.command()
@run_options
@click.option("--database", default=DEFAULT_DATABASE_URL, show_default=True,
              help="The embedded SQLite database.")
@click.pass_obj
def run(settings: Settings, request: RunRequest, as_json: bool, database: str) -> None:
    """Run a swarm in this process: no Redis or PostgreSQL needed."""
    embedded = settings.model_copy(update={"database_url": database,
                                           "broker_url": DEFAULT_BROKER_URL})
    migrate(embedded.database_url)
    app = create_app(embedded)
    rt = app.runtime
    size = WaveSpec.parse(request.config.waves).size
    try:
        with embedded_worker(app, concurrency=min(size, 100)):
            run_id = request.create(rt)
            status = until_finished(rt.engine, run_id, show=not as_json)
    finally:
        rt.engine.dispose()
    _print_status(status, as_json=as_json)
    sys.exit(_exit_code(status))


@cli.command()
@click.argument("run_id", required=False, type=int)
@click.option("--sessions", "with_sessions", is_flag=True, help="List every session too.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_obj
def status(settings: Settings, run_id: int | None, with_sessions: bool, as_json: bool) -> None:
    """Show a run's waves, sessions, artifacts, errors, tokens and cost (default: latest)."""
    engine = make_engine(settings)
    try:
        require_migrated(engine)
        with engine.connect() as conn:
            run_id = run_id if run_id is not None else latest_run_id(conn)
            if run_id is None:
                raise click.ClickException("no runs yet")
            status = run_status(conn, run_id)
            if status["model"].startswith(GEMINI_PREFIX) and not settings.is_embedded:
                status["limiter"] = Providers(settings).limiter_status(status["model"])
            if with_sessions:
                status["session_list"] = session_rows(conn, run_id)
    finally:
        engine.dispose()
    _print_status(status, as_json=as_json)


@cli.command()
@click.argument("run_id", type=int)
@click.pass_obj
def cancel(settings: Settings, run_id: int) -> None:
    """Cancel a run: no new turn or wave starts; turns in flight finish and are recorded."""
    engine = make_engine(settings)
    try:
        require_migrated(engine)
        with engine.begin() as conn:
            done = cancel_run(conn, run_id=run_id, now=utcnow())
    finally:
        engine.dispose()
    click.echo(f"run {run_id} cancelled: {done.ended} sessions ended now, {done.in_flight} "
               "end after the turn they have in flight")


@cli.command()
@click.argument("run_id", type=int)
@click.pass_obj
def resume(settings: Settings, run_id: int) -> None:
    """Dispatch again every session of a run that has not ended (after an outage, a cancel)."""
    rt = create_app(settings).runtime
    try:
        require_migrated(rt.engine)
        with rt.engine.begin() as conn:
            dispatches = resume_run(conn, run_id=run_id, now=utcnow())
        sent = rt.send_all(dispatches)
    finally:
        rt.engine.dispose()
    turns = sum(1 for d in dispatches if d.kind == "turn")
    click.echo(f"run {run_id} resumed: {turns} turns and {len(dispatches) - turns} "
               f"verifications dispatched ({sent} sent)")


def _safe_url(url: str) -> str:
    # Never echo a password.
    return make_url(url).render_as_string(hide_password=True)


def main() -> None:
    """Entry point: map project errors to clear messages and exit codes."""
    try:
        cli(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(EXIT_RUN_INCOMPLETE)
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
