"""Pooled PostgreSQL connections are tested before use only after they sat idle."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from worker.settings import Settings
from worker.store import engine as engine_module
from worker.store.engine import make_engine

pytestmark = pytest.mark.services


def _backend(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


def _terminate(admin: Engine, pid: int) -> None:
    with admin.connect() as conn:
        assert conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar()


@pytest.fixture
def one_connection(settings: Settings) -> Engine:
    return make_engine(settings.model_copy(update={"db_pool_size": 1, "db_max_overflow": 0}))


def _killed_after_use(pool: Engine, admin: Engine) -> int:
    """Use ``pool``'s one connection, then kill its server process; returns its pid."""
    pid = _backend(pool)
    _terminate(admin, pid)
    return pid


def test_an_idle_connection_that_died_is_replaced_unseen(
    one_connection: Engine, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a pooled connection whose server process was killed while it sat idle
    monkeypatch.setattr(engine_module, "PING_IDLE_S", 0.0)
    first = _killed_after_use(one_connection, engine)
    # When the pool hands it out again
    second = _backend(one_connection)
    # Then the checkout found it dead and opened another, and the caller saw no error
    assert second != first
    one_connection.dispose()


def test_a_connection_in_steady_use_is_not_pinged(
    one_connection: Engine, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a pooled connection that was used a moment ago, then killed
    monkeypatch.setattr(engine_module, "PING_IDLE_S", 3600.0)
    first = _killed_after_use(one_connection, engine)
    # When it is used at once: no round trip tested it, so its statement fails
    with pytest.raises(DBAPIError) as raised:
        _backend(one_connection)
    assert raised.value.connection_invalidated
    # Then the failure invalidated it, and the next use gets a new one
    assert _backend(one_connection) != first
    one_connection.dispose()
