"""Engines, migrations and change notifications for the source of truth."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import DBAPIError, DisconnectionError, OperationalError
from sqlalchemy.pool import ConnectionPoolEntry

from worker.errors import NotMigrated
from worker.settings import Settings
from worker.store import statements

if TYPE_CHECKING:
    from alembic.config import Config

logger = logging.getLogger(__name__)

#: PostgreSQL channel on which run progress is announced (payload: the run id).
RUN_CHANNEL = "swarm_run"
#: Seconds a SQLite writer waits for the file lock before failing.
SQLITE_BUSY_TIMEOUT_S = 60
#: Seconds a new PostgreSQL connection may take (unless the URL says) before it fails, so
#: that an unreachable server is reported instead of waited on.
PG_CONNECT_TIMEOUT_S = 10
#: How a PostgreSQL connection notices that its link died, unless the URL says otherwise:
#: data unacknowledged for ``tcp_user_timeout`` milliseconds, or an idle connection's
#: keepalive probes unanswered, fail the statement in seconds. Without them a statement
#: sent into a cut link waits for the kernel's retransmissions, a quarter of an hour,
#: holding its lease's session and its thread. A statement merely slow (a lock wait, a
#: long query) is not affected: the server acknowledges what it was sent.
PG_LINK_OPTIONS = {
    "tcp_user_timeout": 5000,
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 2,
}
#: JSON columns are (de)serialised by orjson: a turn decodes its whole event log, pages
#: included, and the standard library's decoder made that the part of a turn that grows.
#: Keys that are not strings are written as strings, as ``json.dumps`` does.
_JSON_OPTIONS = orjson.OPT_NON_STR_KEYS


def _json_bytes(value: Any) -> bytes:
    """JSON for psycopg, which sends bytes as they are."""
    return orjson.dumps(value, option=_JSON_OPTIONS)


def json_text(value: Any) -> str:
    """A JSON column's value as text, serialised as every JSON column is (SQLite stores it)."""
    return orjson.dumps(value, option=_JSON_OPTIONS).decode()


def utcnow() -> datetime:
    """The current time, timezone-aware, in UTC."""
    return datetime.now(UTC)


#: A pooled connection unused this long is tested before it is handed out. A server
#: restart then costs the statements in flight and at most the first one after it on a
#: busy pool, which invalidates every connection of the pool.
PING_IDLE_S = 1.0
_IDLE_SINCE = "swarm_idle_since"
#: Connections a process has at the least, unless ``SWARM_DB_POOL_SIZE`` says.
DEFAULT_POOL_SIZE = 5
#: Connections beyond those at the least and at the most, unless ``SWARM_DB_MAX_OVERFLOW``
#: says: three workers at their largest (30 connections each, and one for their leases)
#: leave seven of PostgreSQL's default ``max_connections`` of 100 to the scheduler and Flower.
MIN_OVERFLOW = 15
MAX_OVERFLOW = 25
#: Worker threads per overflow connection: a thread holds a connection only between model
#: calls, for a few milliseconds of CPU, so more connections than cores buy nothing.
THREADS_PER_CONNECTION = 10


def pool_sizes(settings: Settings, threads: int | None = None) -> tuple[int, int]:
    """The pool size and overflow of a process that runs ``threads`` tasks at once.

    The settings win when set. Otherwise the process may hold :data:`DEFAULT_POOL_SIZE`
    connections and a tenth of its threads more, bounded so that several workers share one
    PostgreSQL, and it keeps every one it opens: the pool opens them only when tasks need
    them, and an overflow connection would be closed as it comes back, so that under a
    steady load the next task opens a new one, a PostgreSQL backend started for a few
    statements (900 of them in a run of 1,000 sessions, one per five tasks).
    """
    extra = (threads or 0) // THREADS_PER_CONNECTION
    extra = min(max(extra, MIN_OVERFLOW), MAX_OVERFLOW)
    if settings.db_pool_size is None and settings.db_max_overflow is None:
        return DEFAULT_POOL_SIZE + extra, 0
    size = settings.db_pool_size if settings.db_pool_size is not None else DEFAULT_POOL_SIZE
    overflow = settings.db_max_overflow if settings.db_max_overflow is not None else extra
    return size, overflow


def make_engine(
    settings: Settings, *, threads: int | None = None, pool: tuple[int, int] | None = None
) -> Engine:
    """Create the engine for ``settings.database_url``, for ``threads`` concurrent tasks.

    ``pool`` (size, overflow) overrides the pool sized to the threads: ``(1, 0)`` is one
    connection for a thread that must never queue behind the others.

    SQLite gets WAL, a busy timeout and ``BEGIN IMMEDIATE`` transactions, so that
    concurrent writer threads queue on the lock instead of failing on upgrade.
    """
    url = settings.database_url
    pool_size, max_overflow = pool or pool_sizes(settings, threads)
    if settings.is_sqlite:
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_S},
            json_serializer=json_text,
            json_deserializer=orjson.loads,
            pool_size=pool_size,
            max_overflow=max_overflow,
            pool_timeout=settings.db_pool_timeout_s,
        )
        event.listen(engine, "connect", _sqlite_on_connect)
        event.listen(engine, "begin", _sqlite_on_begin)
        return engine
    query = make_url(url).query
    connect_args: dict[str, Any] = {
        k: v
        for k, v in {"connect_timeout": PG_CONNECT_TIMEOUT_S, **PG_LINK_OPTIONS}.items()
        if k not in query
    }
    engine = create_engine(
        url,
        connect_args=connect_args,
        json_serializer=_json_bytes,
        json_deserializer=orjson.loads,
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_timeout=settings.db_pool_timeout_s,
        pool_recycle=1800,
        # The connection checked in last goes out first: a turn that comes back from its
        # model call gets one used a moment ago, which needs no test (PING_IDLE_S), instead
        # of the pool's oldest, which does: one round trip less per checkout, which a slow
        # link makes hundreds of milliseconds.
        pool_use_lifo=True,
    )
    event.listen(engine, "checkin", _mark_idle)
    event.listen(engine, "checkout", _pinger(engine))
    # A turn's statements and round trips go into its timing row.
    statements.count_on(engine)
    return engine


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` says the database could not be reached, not what was asked of it.

    SQLAlchemy flags a connection it found dead (a server restart, a cut link); a new
    connection that could not be made raises psycopg's own ``OperationalError``, whose
    subclasses are errors the server reported (a deadlock, a serialization failure).
    """
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    if not isinstance(exc, OperationalError):
        return False
    cls = type(exc.orig)
    return cls.__module__ == "psycopg" and cls.__name__ == "OperationalError"


def _mark_idle(_dbapi_conn: Any, record: ConnectionPoolEntry) -> None:
    record.info[_IDLE_SINCE] = time.monotonic()


def _pinger(engine: Engine) -> Callable[[Any, ConnectionPoolEntry, Any], None]:
    """A checkout hook that tests a connection idle for ``PING_IDLE_S`` or more.

    SQLAlchemy's ``pool_pre_ping`` tests every checkout, a round trip each time: several
    per turn. A connection in steady use has just proved itself, so only idle ones are
    tested; a dead one is replaced before anyone sees it (the pool tries again).
    """
    dialect = engine.dialect

    def ping(dbapi_conn: Any, record: ConnectionPoolEntry, _proxy: Any) -> None:
        since = record.info.get(_IDLE_SINCE)
        if since is None or time.monotonic() - since < PING_IDLE_S:
            return  # a new connection, or one that just worked
        try:
            dialect.do_ping(dbapi_conn)
        except Exception as exc:
            raise DisconnectionError(f"idle connection is gone: {exc}") from exc

    return ping


def _sqlite_on_connect(dbapi_conn: Any, _record: ConnectionPoolEntry) -> None:
    # Let SQLAlchemy, not the driver, decide when transactions begin.
    dbapi_conn.isolation_level = None
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _sqlite_on_begin(conn: Connection) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE")


def alembic_config(database_url: str) -> Config:
    """An Alembic config for the packaged migrations, aimed at ``database_url``."""
    # Alembic is imported by the functions that migrate or check the schema, not with this
    # module: every worker imports it, and alembic (with mako and pygments) costs a worker
    # process tens of MiB it never uses.
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(__file__).parents[2] / "migrations"))
    cfg.attributes["database_url"] = database_url
    return cfg


def migrate(database_url: str, revision: str = "head") -> None:
    """Bring the database at ``database_url`` to ``revision``."""
    from alembic import command

    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    """Take the database at ``database_url`` back to ``revision``."""
    from alembic import command

    command.downgrade(alembic_config(database_url), revision)


def head_revision() -> str:
    """The latest revision the code knows."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config("")).get_current_head()
    assert head is not None
    return head


def database_problem(exc: OperationalError, database_url: str) -> tuple[str, bool]:
    """One line for a database that cannot be used, with what to do about it, and whether
    it is only out of reach (a service to start) rather than set up wrong."""
    detail = " ".join(str(exc.orig).split())
    url = make_url(database_url)
    where = url.render_as_string(hide_password=True)
    if url.get_backend_name() == "sqlite":
        return (
            f"cannot open the SQLite database {url.database or ':memory:'} ({detail}): "
            "check that its directory exists and is writable"
        ), True
    if "does not exist" in detail and "database" in detail:
        return (
            f"database {url.database!r} does not exist on {url.host or 'localhost'}:"
            f"{url.port or 5432}: create it (createdb {url.database}), then run "
            "`python -m scheduler migrate`"
        ), False
    if "authentication failed" in detail or "password" in detail:
        return (
            f"PostgreSQL refused the credentials of {where}: check the user and password "
            "in SWARM_DATABASE_URL"
        ), False
    return (
        f"database {where} unreachable ({detail.removeprefix('connection failed: ')}): "
        "start PostgreSQL or fix SWARM_DATABASE_URL"
    ), True


def require_migrated(engine: Engine) -> None:
    """Raise :class:`NotMigrated` unless the database is at the latest revision."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        current = MigrationContext.configure(conn).get_current_revision()
    if current != head_revision():
        raise NotMigrated(
            f"database is at revision {current or 'none'}, code expects {head_revision()}; "
            "run `python -m scheduler migrate`"
        )


_NOTIFY = text("SELECT pg_notify(:channel, :payload)")


def notify_run(conn: Connection, run_id: int) -> None:
    """Announce that run ``run_id`` changed, when the transaction commits (PostgreSQL only)."""
    if conn.dialect.name == "postgresql":
        conn.execute(_NOTIFY, {"channel": RUN_CHANNEL, "payload": str(run_id)})


@contextmanager
def run_listener(engine: Engine) -> Iterator[RunListener]:
    """Listen for run changes; yields a listener whose ``wait()`` blocks until one arrives."""
    listener = RunListener(engine)
    try:
        yield listener
    finally:
        listener.close()


class RunListener:
    """Blocks until a run changes (PostgreSQL ``LISTEN``), or times out.

    On SQLite there is nobody to notify across processes, so ``wait`` simply returns after
    its timeout and the caller re-reads the database.
    """

    def __init__(self, engine: Engine) -> None:
        self._conn: Any = None
        if engine.dialect.name == "postgresql":
            self._conn = engine.raw_connection()
            self._conn.driver_connection.autocommit = True
            self._conn.driver_connection.execute(f"LISTEN {RUN_CHANNEL}")

    def wait(self, timeout_s: float) -> set[int]:
        """Return the ids of runs that changed within ``timeout_s`` seconds."""
        if self._conn is None:
            time.sleep(timeout_s)
            return set()
        changed = {
            int(n.payload)
            for n in self._conn.driver_connection.notifies(timeout=timeout_s, stop_after=1)
        }
        return changed

    def close(self) -> None:
        """Stop listening and return the connection."""
        if self._conn is not None:
            # A listening session must not go back to the pool.
            self._conn.invalidate()
            self._conn = None
