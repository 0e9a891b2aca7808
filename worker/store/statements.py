"""What a task asks of the database: statements and round trips, counted from the engine.

A task counts inside :func:`counting`; the listeners that :func:`count_on` puts on an
engine add every statement, ``BEGIN`` and ``COMMIT`` its connections send to the counts of
the context that sends them: a thread's, or under a green pool a greenlet's (each runs in
a context of its own). Outside :func:`counting` nothing is counted.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.engine import Connection

__all__ = ["Counts", "count_on", "counting"]


@dataclass
class Counts:
    """Statements sent, and round trips to the server they took (``BEGIN`` and ``COMMIT``
    included: the driver sends each as one)."""

    statements: int = 0
    round_trips: int = 0


_COUNTS: ContextVar[Counts | None] = ContextVar("swarm_statement_counts", default=None)


@contextmanager
def counting() -> Iterator[Counts]:
    """Count what the block sends, on every engine :func:`count_on` watches."""
    counts = Counts()
    token = _COUNTS.set(counts)
    try:
        yield counts
    finally:
        _COUNTS.reset(token)


def count_on(engine: Engine) -> None:
    """Watch ``engine``'s statements and transactions for :func:`counting`."""
    event.listen(engine, "before_cursor_execute", _statement)
    for name in ("begin", "commit", "rollback"):
        event.listen(engine, name, _transaction)


def _statement(*_: Any) -> None:
    counts = _COUNTS.get()
    if counts is not None:
        counts.statements += 1
        counts.round_trips += 1


def _transaction(conn: Connection) -> None:
    counts = _COUNTS.get()
    # An autocommitted connection sends no BEGIN or COMMIT of its own.
    if counts is not None and conn.get_execution_options().get("isolation_level") != "AUTOCOMMIT":
        counts.round_trips += 1
