"""The fleet's identity, read from its database."""

from __future__ import annotations

from sqlalchemy import Engine, select
from sqlalchemy.exc import OperationalError, ProgrammingError

from worker.errors import NotMigrated
from worker.store.tables import fleet

__all__ = ["fleet_id"]


def fleet_id(engine: Engine) -> str:
    """The id of the fleet whose database ``engine`` reaches.

    Every process pointed at the same database reads the same id, whatever host name or
    address it uses to reach it.

    Raises:
        NotMigrated: the database has no fleet id: it was never migrated (no fleet table), or
            predates the migration that makes one.
    """
    with engine.connect() as conn:
        try:
            found = conn.execute(select(fleet.c.id).order_by(fleet.c.created_at).limit(1)).scalar()
        except (OperationalError, ProgrammingError) as exc:
            # No fleet table: PostgreSQL's undefined_table; SQLite says it in words.
            no_table = getattr(exc.orig, "sqlstate", None) == "42P01"
            if not (no_table or "no such table" in str(exc.orig)):
                raise
            found = None
    if found is None:
        raise NotMigrated("the database has no fleet id: run `python -m scheduler migrate`")
    return str(found)
