"""Alembic environment: URL from :class:`worker.settings.Settings`, metadata from the tables."""

from __future__ import annotations

from alembic import context
from sqlalchemy import engine_from_config, pool

from worker.settings import Settings
from worker.store.tables import metadata

config = context.config


def _url() -> str:
    # A caller (tests, `scheduler migrate`) may hand over a URL; otherwise read SWARM_*.
    url = config.attributes.get("database_url") or config.get_main_option("sqlalchemy.url")
    return str(url) if url else Settings().database_url


def run_migrations_offline() -> None:
    """Emit SQL without a connection."""
    context.configure(
        url=_url(),
        target_metadata=metadata,
        compare_type=True,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Migrate through a live connection."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    section = {"sqlalchemy.url": _url()}
    engine = engine_from_config(section, prefix="sqlalchemy.", poolclass=pool.NullPool)
    with engine.connect() as conn:
        _run(conn)


def _run(connection: object) -> None:
    # render_as_batch lets the same revisions alter tables on SQLite.
    context.configure(
        connection=connection, target_metadata=metadata, compare_type=True, render_as_batch=True
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
