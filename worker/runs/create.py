"""Creating a run: its waves, its sessions and their briefs, in one transaction."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import insert
from sqlalchemy.engine import Connection

from worker.agent.events import Brief
from worker.agent.profiles import DEFAULT_PROFILE, get_profile
from worker.agent.prompt import brief_message, build_prefix, make_brief
from worker.config import RunConfig, WaveSpec
from worker.store.lifecycle import wave_start
from worker.store.tables import events, outbox, runs, sessions, waves
from worker.tasks.dashboard.personas import persona_for


def create_run(
    conn: Connection,
    *,
    model: str,
    config: RunConfig,
    now: datetime,
    profile: str = DEFAULT_PROFILE,
    budget_usd: float | None = None,
    ladder_id: int | None = None,
    tier: str | None = None,
    start: bool = True,
) -> int:
    """Insert a run with its waves and sessions, and (``start``) the outbox row of wave 1.

    A ladder's later runs are created with ``start=False``: the run before them writes
    that row when it finishes.
    """
    spec = WaveSpec.parse(config.waves)
    prefix = build_prefix(get_profile(profile))
    run_id = conn.execute(
        insert(runs)
        .values(
            profile=profile,
            model=model,
            config=config.model_dump(mode="json"),
            prefix_sha256=prefix.sha256,
            budget_usd=budget_usd,
            status="pending",
            ladder_id=ladder_id,
            tier=tier,
            created_at=now,
        )
        .returning(runs.c.id)
    ).scalar_one()
    wave_ids = (
        conn.execute(
            insert(waves).returning(waves.c.id, sort_by_parameter_order=True),
            [
                {
                    "run_id": run_id,
                    "index": i,
                    "size": spec.size,
                    "status": "pending",
                    "done_count": 0,
                }
                for i in range(1, spec.waves + 1)
            ],
        )
        .scalars()
        .all()
    )
    rows = []
    for n in range(spec.total):
        rows.append(
            {
                "run_id": run_id,
                "wave_id": wave_ids[n // spec.size],
                "index": n,
                "persona": persona_for(config.sim_mix, config.seed, n).value,
                "brief": make_brief(config.seed, n),
                "status": "pending",
            }
        )
    session_ids = (
        conn.execute(insert(sessions).returning(sessions.c.id, sort_by_parameter_order=True), rows)
        .scalars()
        .all()
    )
    conn.execute(
        insert(events),
        [
            {
                "session_id": session_id,
                "turn_no": 0,
                "seq": 0,
                "kind": Brief.kind.value,
                "payload": Brief(brief_message(row["brief"])).to_payload(),
                "created_at": now,
            }
            for session_id, row in zip(session_ids, rows, strict=True)
        ],
    )
    if start:
        conn.execute(insert(outbox).values(wave_start(run_id, 1, now)))
    return int(run_id)
