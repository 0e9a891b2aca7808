"""The verify worker's own PostgreSQL role: what it may read and write, and a run with it."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from urllib.parse import quote

import psycopg
import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, select

from scheduler.cli import cli
from scheduler.cli.follow import until_finished
from tests.conftest import PG_ADMIN_URL, WorkerProcess, service_env
from tests.factories import enqueue, make_run, passed_verdicts
from worker.settings import Settings
from worker.store.engine import downgrade, make_engine, migrate
from worker.store.roles import VERIFY_ROLE, can_reconcile
from worker.store.tables import samples

pytestmark = pytest.mark.services


def as_verify_role(url: str) -> str:
    """``url``, connecting as the test's superuser but acting as the verify role.

    The role is NOLOGIN until ``scheduler migrate`` gives it a password; acting as it
    through ``SET ROLE`` is checked against exactly its privileges.
    """
    return f"{url}?options={quote('-c role=' + VERIFY_ROLE)}"


def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT count(*) FROM usage",
        "SELECT count(*) FROM plans",
        "INSERT INTO sessions (run_id, wave_id, index, persona, brief, status, next_turn, "
        "turn_attempts, lease_epoch, repair_round, model_retries) "
        "SELECT run_id, wave_id, 99, persona, brief, status, 0, 0, 0, 0, 0 FROM sessions",
        "UPDATE sessions SET brief = '{}'",
        "UPDATE sessions SET next_turn = next_turn + 1",
        "DELETE FROM sessions",
        "DELETE FROM verifications",
        "UPDATE artifact_versions SET sha256 = ''",
        "SELECT sha256 FROM artifacts",
        "UPDATE blobs SET content = ''",
        "INSERT INTO blobs (sha256, content, size_bytes) VALUES ('x', 'x', 1)",
        "DELETE FROM blobs",
    ],
)
def test_the_verify_role_is_refused_what_a_verdict_does_not_need(
    settings: Settings, engine: Engine, statement: str
) -> None:
    # Given a database with a run in it
    make_run(engine)
    # When the verify role reads spending or plans, or writes what a verdict never writes
    with (
        psycopg.connect(_libpq(as_verify_role(settings.database_url))) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute(statement)
    # Then PostgreSQL refuses it (above); and the owner's role still reconciles
    assert can_reconcile(engine)


def test_the_verify_role_reads_what_a_verification_reads(
    settings: Settings, engine: Engine
) -> None:
    make_run(engine)
    with psycopg.connect(_libpq(as_verify_role(settings.database_url))) as conn:
        assert conn.execute("SELECT current_user").fetchone() == (VERIFY_ROLE,)
        for table in ("artifact_versions", "blobs", "sessions", "runs", "waves", "fleet"):
            conn.execute(f"SELECT count(*) FROM {table}")
        # which files a session has, to judge its whole workspace, but not their text
        conn.execute("SELECT id, session_id, name, version FROM artifacts WHERE deleted_at IS NULL")
    role_engine = make_engine(Settings(database_url=as_verify_role(settings.database_url)))
    try:
        assert not can_reconcile(role_engine)
    finally:
        role_engine.dispose()


def test_migration_is_idempotent_across_databases_and_downgrade_spares_the_others(
    pg_url: str,
) -> None:
    # Given a second database migrated beside the session's (the role exists already)
    name = f"swarm_role_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    try:
        migrate(Settings(database_url=url).database_url)
        # When that database is taken back to base
        downgrade(Settings(database_url=url).database_url, "base")
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    # Then the role and its grants in the session's database are untouched
    with psycopg.connect(_libpq(as_verify_role(Settings(database_url=pg_url).database_url))) as c:
        c.execute("SELECT count(*) FROM artifact_versions")


@pytest.mark.browser
@pytest.mark.slow
def test_a_run_verifies_with_the_verify_role_end_to_end(
    settings: Settings,
    engine: Engine,
    start_worker: Callable[..., WorkerProcess],
) -> None:
    # Given a sessions worker on the owner's role, and a verify worker that holds only the
    # verify role's URL (no SWARM_DATABASE_URL, no model key)
    start_worker("-Q", "sessions", concurrency=4)
    env = service_env(
        settings,
        SWARM_VERIFIER="browser",
        SWARM_VERIFY_DATABASE_URL=as_verify_role(settings.database_url),
    )
    del env["SWARM_DATABASE_URL"]
    env.pop("GEMINI_API_KEY", None)
    verifier = WorkerProcess(
        env, ["-Q", "verify", "-P", "threads", "-c", "2", "-n", f"v-{secrets.token_hex(3)}@%h"]
    ).start()
    try:
        # When a run is enqueued
        run_id = enqueue(settings, "--wave", "1x2", "--sim-latency-ms", "20")
        status = until_finished(engine, run_id, show=False, timeout_s=240)
    finally:
        verifier.stop()
    # Then every artifact was judged in the browser by the verify role's worker
    assert status.sessions.succeeded == 2, status
    assert passed_verdicts(engine, run_id, "method") == ["browser", "browser"]
    # And the verify worker's memory samples were written through its role
    with engine.connect() as conn:
        assert conn.execute(select(samples.c.id).where(samples.c.role == "verify")).first()
    log = "\n".join(verifier.log)
    assert "no reconciler here" in log
    assert "permission denied" not in log.lower()
    assert verifier.errors() == []


def test_migrate_gives_the_verify_role_the_password_of_its_url(pg_url: str) -> None:
    # Given the verify role's URL with a password, as the compose migrate service has it
    password = f"pw-{secrets.token_hex(6)}"
    verify_url = pg_url.replace("postgres@", f"{VERIFY_ROLE}:{password}@", 1)
    assert verify_url != pg_url
    # When the database is migrated with it set
    result = CliRunner().invoke(
        cli, ["--database-url", pg_url, "migrate"], env={"SWARM_VERIFY_DATABASE_URL": verify_url}
    )
    # Then the role may log in, and a connection as it acts with its privileges only
    assert result.exit_code == 0, result.output
    assert f"role {VERIFY_ROLE} may log in" in result.output
    with psycopg.connect(verify_url) as conn:
        assert conn.execute("SELECT current_user").fetchone() == (VERIFY_ROLE,)
        conn.execute("SELECT count(*) FROM artifact_versions")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT count(*) FROM usage")
