"""Migrations: upgrade, downgrade to base and upgrade again, on PostgreSQL and SQLite; the
migrated schema is the one the tables describe."""

from __future__ import annotations

import hashlib
import json
import secrets
from pathlib import Path
from typing import Any

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from tests.conftest import PG_ADMIN_URL
from worker.errors import NotMigrated
from worker.settings import Settings
from worker.store.engine import downgrade, head_revision, make_engine, migrate, require_migrated
from worker.store.tables import metadata, unpack

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
    "blobs",
    "lease_holders",
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
        # and the log is compressed with lz4 (Debian's server has it), while the texts kept
        # apart, compressed by the worker, are stored out of line as they are
        assert _compression(url) == {"events.payload": "l"}, _compression(url)
        assert _stored(
            url,
            "SELECT attstorage FROM pg_attribute WHERE attrelid = 'blobs'::regclass"
            " AND attname = 'content'",
        ) == [("e",)]
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


#: A page as revision 0011 stored it, three times.
_PAGE = "<!doctype html>" + "<p>page ✓</p>" * 200


def _page_rows(url: str) -> None:
    """A session with a page in its artifact, its version and its model call (at 0011)."""
    engine = create_engine(url)
    sha = hashlib.sha256(_PAGE.encode()).hexdigest()
    call = {"name": "manage_artifact", "args": {"action": "create", "content": _PAGE}}
    model = {"content": {"role": "model", "parts": [{"text": "x"}, {"function_call": call}]}}
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO runs (id, profile, model, config, prefix_sha256, status,"
                    " duplicate_turn_tasks, created_at) VALUES (1, 'p', 'sim', '{}', '', 'done', 0,"
                    " CURRENT_TIMESTAMP)"
                )
            )
            conn.execute(
                text(
                    'INSERT INTO waves (id, run_id, "index", size, status, done_count)'
                    " VALUES (1, 1, 1, 1, 'done', 1)"
                )
            )
            conn.execute(
                text(
                    'INSERT INTO sessions (id, run_id, wave_id, "index", persona, brief, status,'
                    " next_turn, turn_attempts, lease_epoch, repair_round, model_retries)"
                    " VALUES (1, 1, 1, 0, 'p', '{}', 'done', 1, 0, 0, 0, 0)"
                )
            )
            conn.execute(
                text(
                    "INSERT INTO artifacts (id, session_id, name, version, content, size_bytes,"
                    " updated_at) VALUES (1, 1, 'a.html', 1, :page, 1, CURRENT_TIMESTAMP)"
                ),
                {"page": _PAGE},
            )
            conn.execute(
                text(
                    "INSERT INTO artifact_versions (artifact_id, version, turn_no, content, sha256,"
                    " size_bytes, created_at) VALUES (1, 1, 0, :page, :sha, :size,"
                    " CURRENT_TIMESTAMP)"
                ),
                {"page": _PAGE, "sha": sha, "size": len(_PAGE.encode())},
            )
            conn.execute(
                text(
                    "INSERT INTO events (session_id, turn_no, seq, kind, payload, created_at)"
                    " VALUES (1, 0, 0, 'model', :payload, CURRENT_TIMESTAMP),"
                    " (1, 0, 1, 'feedback', :feedback, CURRENT_TIMESTAMP)"
                ),
                {"payload": json.dumps(model), "feedback": json.dumps({"text": _PAGE})},
            )
    finally:
        engine.dispose()


def _stored(url: str, query: str) -> list[tuple[Any, ...]]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(query))]
    finally:
        engine.dispose()


def _moves_pages(url: str) -> None:
    # Given a database at 0011 holding a page three times
    migrate(url, "0011")
    _page_rows(url)
    sha = hashlib.sha256(_PAGE.encode()).hexdigest()
    # When it is upgraded
    migrate(url)
    # Then the page is one blob, named by the artifact, its version and the model's call
    ((key, packed, size),) = _stored(url, "SELECT sha256, content, size_bytes FROM blobs")
    assert (key, unpack(bytes(packed)), size) == (sha, _PAGE, len(_PAGE.encode()))
    assert _stored(url, "SELECT sha256 FROM artifacts") == [(sha,)]
    assert _stored(url, "SELECT sha256 FROM artifact_versions") == [(sha,)]
    ((payload, refs),) = _stored(url, "SELECT payload, blobs FROM events WHERE kind = 'model'")
    payload, refs = (json.loads(v) if isinstance(v, str) else v for v in (payload, refs))
    assert payload["content"]["parts"][1]["function_call"]["args"]["content"] == {"$blob": sha}
    assert refs == [[["content", "parts", 1, "function_call", "args", "content"], sha]]
    # and the verifier's feedback keeps its text in place
    assert _stored(url, "SELECT blobs FROM events WHERE kind = 'feedback'") == [(None,)]
    # When it is taken back, every text is where it was
    downgrade(url, "0011")
    assert _stored(url, "SELECT content FROM artifacts") == [(_PAGE,)]
    assert _stored(url, "SELECT content, sha256 FROM artifact_versions") == [(_PAGE, sha)]
    ((payload,),) = _stored(url, "SELECT payload FROM events WHERE kind = 'model'")
    payload = json.loads(payload) if isinstance(payload, str) else payload
    assert payload["content"]["parts"][1]["function_call"]["args"]["content"] == _PAGE


def test_pages_move_to_blobs_and_back_on_sqlite(tmp_path: Path) -> None:
    _moves_pages(f"sqlite:///{tmp_path / 'swarm.db'}")


@pytest.mark.services
def test_pages_move_to_blobs_and_back_on_postgresql(pg_url: str) -> None:
    name = f"swarm_mig_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        _moves_pages(
            Settings(database_url=PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}").database_url
        )
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
