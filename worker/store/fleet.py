"""The fleet's identity, read from its database."""

from __future__ import annotations

from sqlalchemy import Engine, select

from worker.errors import NotMigrated
from worker.store.tables import fleet

__all__ = ["fleet_id"]


def fleet_id(engine: Engine) -> str:
    """The id of the fleet whose database ``engine`` reaches.

    Every process pointed at the same database reads the same id, whatever host name or
    address it uses to reach it.

    Raises:
        NotMigrated: the database has no fleet id (it predates the migration that makes it).
    """
    with engine.connect() as conn:
        found = conn.execute(select(fleet.c.id).order_by(fleet.c.created_at).limit(1)).scalar()
    if found is None:
        raise NotMigrated("the database has no fleet id: run `python -m scheduler migrate`")
    return str(found)
