"""The verify worker's least-privileged PostgreSQL role (made by migration 0006)."""

from __future__ import annotations

from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

__all__ = ["VERIFY_ROLE", "can_reconcile", "enable_verify_login"]

#: The verify worker's role; cluster-wide, granted per database by the migration.
VERIFY_ROLE = "swarm_verify"


def can_reconcile(engine: Engine) -> bool:
    """Whether this process's role may re-dispatch due work (the verify role may not).

    SQLite has no roles: always True there.
    """
    if engine.dialect.name != "postgresql":
        return True
    with engine.connect() as conn:
        return bool(
            conn.execute(
                text(
                    "SELECT has_table_privilege('outbox', 'INSERT, UPDATE')"
                    " AND has_table_privilege('usage', 'SELECT')"
                )
            ).scalar()
        )


def enable_verify_login(engine: Engine, verify_url: str) -> bool:
    """Let the verify role log in with the password of ``verify_url``.

    Args:
        engine: A connection as a role that may alter roles (the database's owner).
        verify_url: ``SWARM_VERIFY_DATABASE_URL``; its user must be the verify role.

    Returns:
        True when the role was given a login; False without a password in the URL, for
        another user or on SQLite.
    """
    url = make_url(verify_url)
    if engine.dialect.name != "postgresql" or url.username != VERIFY_ROLE or not url.password:
        return False
    with engine.begin() as conn:
        # ALTER ROLE takes no bind parameters: the server quotes the password itself.
        statement = conn.execute(
            text(
                "SELECT format('ALTER ROLE %I LOGIN PASSWORD %L',"
                " CAST(:role AS text), CAST(:password AS text))"
            ),
            {"role": VERIFY_ROLE, "password": url.password},
        ).scalar_one()
        conn.exec_driver_sql(statement)
    return True
