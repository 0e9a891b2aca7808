"""Migrations: upgrade, downgrade to base and upgrade again, on PostgreSQL and SQLite; the
migrated schema is the one the tables describe."""

from __future__ import annotations

import secrets
from pathlib import Path

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from tests.conftest import PG_ADMIN_URL
from worker.errors import NotMigrated
from worker.settings import Settings
from worker.store.engine import downgrade, head_revision, make_engine, migrate, require_migrated
from worker.store.tables import metadata

EXPECTED = {
    "runs",
    "waves",
    "sessions",
    "events",
    "artifacts",
    "artifact_versions",
    "plans",
    "usage",
    "verifications",
    "samples",
    "outbox",
    "ladders",
    "caches",
    "fleet",
    "turn_timings",
    "reservations",
}


def _tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def _drift(url: str) -> list[object]:
    """What autogenerate would write to bring the migrated schema to the tables: nothing."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            return list(compare_metadata(context, metadata))
    finally:
        engine.dispose()


def _round_trip(url: str) -> None:
    migrate(url)
    assert _tables(url) == EXPECTED == set(metadata.tables)
    assert _drift(url) == []
    downgrade(url, "base")
    assert _tables(url) == set()
    migrate(url)
    assert _tables(url) == EXPECTED
    engine = make_engine(Settings(database_url=url))
    require_migrated(engine)
    engine.dispose()


def _compression(url: str) -> dict[str, str]:
    """``table.column`` of the page columns to their compression ('l' for lz4, '' default)."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT c.relname, a.attname, a.attcompression FROM pg_attribute a"
                    " JOIN pg_class c ON c.oid = a.attrelid"
                    " WHERE (c.relname, a.attname) IN (('events', 'payload'),"
                    " ('artifacts', 'content'), ('artifact_versions', 'content'))"
                )
            ).all()
        return {f"{r[0]}.{r[1]}": r[2] for r in rows}
    finally:
        engine.dispose()


@pytest.mark.services
def test_round_trip_on_postgresql(pg_url: str) -> None:
    name = f"swarm_mig_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = Settings(database_url=PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}").database_url
    try:
        _round_trip(url)
        # and the columns that hold pages are compressed with lz4 (Debian's server has it)
        assert set(_compression(url).values()) == {"l"}, _compression(url)
        downgrade(url, "0008")
        assert set(_compression(url).values()) == {""}
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def test_round_trip_on_sqlite(tmp_path: Path) -> None:
    _round_trip(f"sqlite:///{tmp_path / 'swarm.db'}")


def test_an_unmigrated_database_is_refused_with_a_hint(tmp_path: Path) -> None:
    engine = make_engine(Settings(database_url=f"sqlite:///{tmp_path / 'empty.db'}"))
    with pytest.raises(NotMigrated, match="scheduler migrate"):
        require_migrated(engine)
    engine.dispose()
    assert head_revision()
