"""Pooled PostgreSQL connections are tested before use only after they sat idle."""

from __future__ import annotations

import socket

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError, OperationalError

from worker.settings import Settings
from worker.store import engine as engine_module
from worker.store.engine import PG_LINK_OPTIONS, connection_lost, make_engine

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


def _closed_port() -> int:
    """A port of this host nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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


def test_a_lost_connection_is_told_from_an_error_the_server_reported(
    one_connection: Engine, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a connection killed in steady use, a server that cannot be reached, and an
    # error the server itself reported, an OperationalError too (a lock not available)
    monkeypatch.setattr(engine_module, "PING_IDLE_S", 3600.0)
    _killed_after_use(one_connection, engine)
    with pytest.raises(DBAPIError) as killed:
        _backend(one_connection)
    unreachable = make_engine(
        Settings(database_url=f"postgresql+psycopg://127.0.0.1:{_closed_port()}/test")
    )
    with pytest.raises(DBAPIError) as refused, unreachable.connect():
        pass
    with engine.connect() as holder, engine.connect() as waiter:
        holder.execute(text("SELECT pg_advisory_lock(4242)"))
        waiter.execute(text("SET lock_timeout = '10ms'"))
        with pytest.raises(OperationalError) as reported:
            waiter.execute(text("SELECT pg_advisory_lock(4242)"))
    # Then the first two say the database could not be reached, the last does not
    assert connection_lost(killed.value) and connection_lost(refused.value)
    assert not connection_lost(reported.value)
    one_connection.dispose()
    unreachable.dispose()


def test_a_connection_notices_a_dead_link_in_seconds(one_connection: Engine) -> None:
    # Given a pooled PostgreSQL connection
    with one_connection.connect() as conn:
        raw = conn.connection.dbapi_connection
        assert raw is not None
        # Then it was opened with a TCP user timeout and keepalives, unless the URL said
        parameters = raw.info.get_parameters()
    for name, value in PG_LINK_OPTIONS.items():
        assert parameters[name] == str(value)
    one_connection.dispose()


def test_the_connection_checked_in_last_goes_out_first(settings: Settings) -> None:
    # Given a pool of two connections, the first returned a moment before the second
    pool = make_engine(settings.model_copy(update={"db_pool_size": 2, "db_max_overflow": 0}))
    first, second = pool.connect(), pool.connect()
    pids = [int(c.execute(text("SELECT pg_backend_pid()")).scalar_one()) for c in (first, second)]
    first.close()
    second.close()
    # When a connection is asked for, Then it is the one used last: no idle one to test
    assert _backend(pool) == pids[1]
    pool.dispose()
