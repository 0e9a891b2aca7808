"""Problems an operator must fix, each said in one line: what went wrong and what to do.

A bad setting, a broker or database that cannot be reached, a run that could not be sent
or that no worker picks up: each is an :class:`OperatorError` carrying its exit code, so
that ``python -m scheduler`` prints ``error: …`` on one line and never a traceback.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any

import click
import kombu.exceptions
import sqlalchemy.exc
from pydantic import ValidationError
from sqlalchemy import Engine
from sqlalchemy.engine import make_url

from worker.fleet.dispatch import Dispatcher
from worker.fleet.runtime import Runtime
from worker.settings import Settings, describe_invalid
from worker.store.due import Dispatch
from worker.store.engine import database_problem, make_engine, require_migrated

if TYPE_CHECKING:
    from celery import Celery

#: The command did what was asked.
EXIT_OK = 0
#: The run ended, but not every session succeeded.
EXIT_RUN_INCOMPLETE = 1
#: Bad input: options, ids, configuration.
EXIT_USAGE = 2
#: A service (database, broker) could not be used.
EXIT_UNAVAILABLE = 3
#: The run was created but not all of its work could be sent; ``resume`` sends it.
EXIT_NOT_DISPATCHED = 4
#: Work was due but no worker claimed any of it for too long.
EXIT_NO_WORKER = 5

#: Seconds the broker check waits for Redis to answer.
BROKER_CHECK_TIMEOUT_S = 3.0
#: The command line that starts a worker on both queues.
WORKER_COMMAND = "python -m worker -Q sessions,verify"


class OperatorError(click.ClickException):
    """A problem the operator must fix; shown as one ``error:`` line, exits ``exit_code``."""

    exit_code = EXIT_USAGE

    def show(self, file: IO[Any] | None = None) -> None:
        """Print the one line on stderr."""
        click.echo(f"error: {self.format_message()}", err=True)


class ServiceUnavailable(OperatorError):
    """The broker or the database cannot be reached."""

    exit_code = EXIT_UNAVAILABLE


class NotDispatched(OperatorError):
    """The run is recorded but some of its work could not be sent to the broker."""

    exit_code = EXIT_NOT_DISPATCHED


class NoWorker(OperatorError):
    """Work is due and no worker has claimed any of it for too long."""

    exit_code = EXIT_NO_WORKER


@contextmanager
def open_store(settings: Settings) -> Iterator[Engine]:
    """The store the settings name, checked to be at the latest schema; closed afterwards.

    Raises:
        NotMigrated: the database is not at the latest revision (one line: migrate).
    """
    engine = make_engine(settings)
    try:
        require_migrated(engine)
        yield engine
    finally:
        engine.dispose()


@contextmanager
def open_runtime(app: Any) -> Iterator[Runtime]:
    """The app's runtime on a store checked to be at the latest schema; closed afterwards."""
    rt: Runtime = app.runtime
    try:
        require_migrated(rt.engine)
        yield rt
    finally:
        rt.engine.dispose()


def safe_url(url: str) -> str:
    """``url`` with its password hidden."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (sqlalchemy.exc.ArgumentError, ValueError):
        return url.split("://", 1)[0] + "://…"


def settings_error(exc: ValidationError, *, option: str | None = None) -> OperatorError:
    """One line for settings that do not validate, naming the variables (or ``option``)."""
    return OperatorError(describe_invalid(exc, option=option))


def database_error(exc: sqlalchemy.exc.OperationalError, database_url: str) -> OperatorError:
    """One line for a database that cannot be used, with what to do about it."""
    line, unavailable = database_problem(exc, database_url)
    return ServiceUnavailable(line) if unavailable else OperatorError(line)


def check_broker(
    app: Celery, settings: Settings, *, timeout_s: float = BROKER_CHECK_TIMEOUT_S
) -> None:
    """Make sure work sent now would reach the workers, before anything is created.

    Connects the way ``app`` sends tasks (its URL, TLS and transport options), once, with
    a short timeout instead of Celery's patient retries.

    Raises:
        OperatorError: the broker is the embedded one, which no other process can reach.
        ServiceUnavailable: the broker does not answer within ``timeout_s``.
    """
    if settings.is_embedded:
        raise OperatorError(
            "this command hands work to workers through a broker, and the embedded one "
            "lives in this process: set SWARM_BROKER_URL=redis://host:6379/0 "
            "(or `python -m scheduler run` runs a swarm here)"
        )
    with app.connection_for_write() as conn:
        options = {
            **conn.transport_options,
            "socket_connect_timeout": timeout_s,
            "socket_timeout": timeout_s,
        }
        with conn.clone(transport_options=options) as probe:
            try:
                probe.ensure_connection(
                    max_retries=1, interval_start=0, interval_step=0, timeout=timeout_s
                )
            except (kombu.exceptions.OperationalError, OSError) as exc:
                raise ServiceUnavailable(
                    f"broker {safe_url(settings.broker_url)} unreachable ({_first_line(exc)}): "
                    "start Redis or fix SWARM_BROKER_URL; nothing was created or sent"
                ) from None


def send_or_raise(dispatcher: Dispatcher, items: Iterable[Dispatch], *, run_id: int) -> int:
    """Send every task; on the first failure say how to send them again.

    What the database decided stays decided, so ``resume`` (or a worker's reconciler, once
    the broker is back) sends what did not go.

    Raises:
        NotDispatched: a send failed.
    """
    sent = 0
    for item in items:
        try:
            dispatcher.send(item)
        except Exception as exc:  # kombu raises many types, all of them mean "not sent"
            raise NotDispatched(
                f"run {run_id} is recorded but its work could not be sent to the broker "
                f"({_first_line(exc)}); it is resumable: once the broker is up, run "
                f"`python -m scheduler resume {run_id}`"
            ) from None
        sent += 1
    return sent


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
