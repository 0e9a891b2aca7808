"""Creating a run: its waves, its sessions, their briefs and starting files, in one transaction."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import insert
from sqlalchemy.engine import Connection

from worker.agent.events import Brief
from worker.agent.prompt import brief_message, build_prefix
from worker.agent.workspace import seed_files
from worker.config import RunConfig, WaveSpec
from worker.profiles import DEFAULT_PROFILE, get_profile
from worker.store.tables import events, outbox, runs, sessions, waves
from worker.store.waves import wave_start
from worker.tasks.fingerprint import fingerprint
from worker.tasks.personas import check_mix, pick_persona
from worker.tasks.registry import DEFAULT_TASK, load_task
from worker.tasks.selection import assign, select

__all__ = ["create_run"]


def create_run(
    conn: Connection,
    *,
    model: str,
    config: RunConfig,
    now: datetime,
    task: str = DEFAULT_TASK,
    profile: str = DEFAULT_PROFILE,
    budget_usd: float | None = None,
    ladder_id: int | None = None,
    tier: str | None = None,
    start: bool = True,
) -> int:
    """Insert a run with its waves and sessions, and (``start``) the outbox row of wave 1.

    A ladder's later runs are created with ``start=False``: the run before them writes
    that row when it finishes.

    Args:
        conn: A connection inside the caller's transaction.
        model: The model that plays the sessions.
        config: The run's behaviour (its waves, seed, instances, limits, sim personas).
        now: Creation time.
        task: How to load the task: an entry point's name or ``package.module:factory``.
        profile: The run's profile.
        budget_usd: Dollars the whole run may spend.
        ladder_id: The ladder the run is a tier of.
        tier: Its tier, as written.
        start: Write the outbox row of wave 1.

    Raises:
        ConfigError: the task cannot be loaded.
        InputError: the run's instances, sample or persona mix do not fit the task.
    """
    spec = WaveSpec.parse(config.waves)
    work = load_task(task)
    mix = config.sim_mix or {work.default_persona: 1.0}
    check_mix(mix, work.personas, task=work.name)
    chosen = select(work, instances=config.instances, sample=config.sample, seed=config.seed)
    plan = assign(chosen, spec.total)
    prefix = build_prefix(work, get_profile(profile))
    run_id = conn.execute(
        insert(runs)
        .values(
            profile=profile,
            model=model,
            config=config.model_dump(mode="json"),
            prefix_sha256=prefix.sha256,
            task=work.name,
            task_ref=task,
            task_version=work.version,
            task_sha256=fingerprint(work),
            verifier=work.verifier.value,
            budget_usd=budget_usd,
            # A budget's ledger: what the run spent, and what its calls in flight hold.
            spent_usd=None if budget_usd is None else 0.0,
            reserved_usd=None if budget_usd is None else 0.0,
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
    rows = [
        {
            "run_id": run_id,
            "wave_id": wave_ids[n // spec.size],
            "index": n,
            "persona": pick_persona(mix, config.seed, n),
            "instance_id": played.instance.id,
            "epoch": played.epoch,
            "brief": dict(played.instance.public),
            "status": "pending",
        }
        for n, played in enumerate(plan)
    ]
    session_ids = list(
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
                "payload": Brief(brief_message(work, played.instance)).to_payload(),
                "created_at": now,
            }
            for session_id, played in zip(session_ids, plan, strict=True)
        ],
    )
    starting = [dict(work.files(played.instance.without_hidden())) for played in plan]
    seed_files(conn, session_ids=session_ids, files=starting, now=now)
    if start:
        conn.execute(insert(outbox).values(wave_start(run_id, 1, now)))
    return int(run_id)
