"""Explicit context caches: one per run, created by its first turn, deleted when it ends.

The cache holds the run's stable prefix (system instruction, tools, tool config), which is
byte-identical across the run's sessions; requests then name the cache instead of sending
the prefix. The database records each cache, so every worker uses the same one and a
reconciler pass deletes it once the run has ended.
"""

from __future__ import annotations

import logging

from sqlalchemy import insert, select, update
from sqlalchemy.engine import Connection

from worker.agent.prompt import Prefix
from worker.errors import SwarmError
from worker.fleet.runtime import Runtime
from worker.store.tables import caches, runs

logger = logging.getLogger(__name__)


def ensure_cache(rt: Runtime, *, run_id: int, model: str, prefix: Prefix, tool_mode: str) -> str:
    """The name of the run's cache, created at the provider by the first turn that asks.

    Raises:
        ModelUnavailable: the provider failed for now (the turn is retried).
        ModelFatal: the provider refused to cache the prefix.
    """
    with rt.engine.connect() as conn:
        name = _live(conn, run_id)
    if name is not None:
        return name
    with rt.engine.begin() as conn:
        # The run's row lock makes the first turns of a run wait for one creation.
        conn.execute(select(runs.c.id).where(runs.c.id == run_id).with_for_update())
        name = _live(conn, run_id)
        if name is not None:
            return name
        created = rt.providers.create_cache(
            model=model,
            system_instruction=prefix.system_instruction,
            tools=prefix.tools,
            tool_mode=tool_mode,
            display_name=f"swarm run {run_id} {prefix.sha256[:12]}",
        )
        conn.execute(
            insert(caches).values(
                run_id=run_id,
                model=model,
                name=created.name,
                tokens=created.tokens,
                created_at=rt.clock(),
                expires_at=created.expires_at,
            )
        )
    logger.info("run %s: cached its prefix as %s (%d tokens)", run_id, created.name, created.tokens)
    return created.name


def _live(conn: Connection, run_id: int) -> str | None:
    return conn.execute(
        select(caches.c.name).where(caches.c.run_id == run_id, caches.c.deleted_at.is_(None))
    ).scalar()


def drop_ended(rt: Runtime) -> int:
    """Delete the caches of runs that have ended; returns how many were deleted.

    A cache the provider cannot delete now expires on its own (``cache_ttl_s``).
    """
    with rt.engine.begin() as conn:
        ended = select(runs.c.id).where(runs.c.finished_at.is_not(None))
        # Claimed by UPDATE ... RETURNING: two reconcilers never delete the same cache.
        names = conn.execute(
            update(caches)
            .where(caches.c.deleted_at.is_(None), caches.c.run_id.in_(ended))
            .values(deleted_at=rt.clock())
            .returning(caches.c.run_id, caches.c.name)
        ).all()
    for run_id, name in names:
        try:
            rt.providers.delete_cache(name)
        except SwarmError as exc:
            logger.warning(
                "run %s: could not delete cache %s (%s); it expires on its own", run_id, name, exc
            )
    return len(names)
