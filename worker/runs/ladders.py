"""Concurrency ladders: the same swarm at growing concurrency, tier after tier, per profile."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import insert
from sqlalchemy.engine import Connection

from worker.config import RunConfig, WaveSpec
from worker.errors import InputError
from worker.profiles import get_profile
from worker.runs.create import create_run
from worker.store.tables import ladders
from worker.tasks.registry import DEFAULT_TASK

#: The tiers of the seed write-up: one session, five in a row, then growing waves.
DEFAULT_TIERS = ("1", "5x1", "5x5", "10x5", "10x10")


def parse_tiers(text: str) -> tuple[str, ...]:
    """Parse ``1,5x1,5x5`` into tiers, each a wave spec as written.

    Raises:
        InputError: an empty list or a malformed tier.
    """
    tiers = tuple(t.strip() for t in text.split(",") if t.strip())
    for tier in tiers:
        WaveSpec.parse(tier)
    if not tiers:
        raise InputError("the tier list is empty")
    return tiers


def create_ladder(
    conn: Connection,
    *,
    model: str,
    tiers: tuple[str, ...],
    profiles: tuple[str, ...],
    config: RunConfig,
    now: datetime,
    budget_usd: float | None = None,
    task: str = DEFAULT_TASK,
) -> tuple[int, list[int]]:
    """Create a ladder and all its runs; only the first is started.

    Each profile climbs every tier; a tier has the same seed, and so the same briefs, for
    every profile, which makes the profiles comparable tier by tier.

    Returns:
        The ladder id and its run ids in the order they will run.
    """
    for name in profiles:
        get_profile(name)
    ladder_id = conn.execute(
        insert(ladders)
        .values(
            model=model,
            tiers=list(tiers),
            profiles=list(profiles),
            config=config.model_dump(mode="json"),
            status="running",
            created_at=now,
        )
        .returning(ladders.c.id)
    ).scalar_one()
    run_ids: list[int] = []
    for profile in profiles:
        for tier in tiers:
            run_ids.append(
                create_run(
                    conn,
                    model=model,
                    config=config.model_copy(update={"waves": str(WaveSpec.parse(tier))}),
                    profile=profile,
                    now=now,
                    budget_usd=budget_usd,
                    task=task,
                    ladder_id=ladder_id,
                    tier=tier,
                    start=not run_ids,
                )
            )
    return int(ladder_id), run_ids
