"""the verify worker's own role; a video beside each verdict

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 03:10:00.000000

Every artifact is untrusted model output, rendered by the verify worker: that worker gets a
PostgreSQL role of its own, ``swarm_verify``, that can read what a verification reads and
write a verdict and the session transition it causes, and nothing else (no ``usage``, no
``plans``, no ``artifacts``, no ``caches``; no DELETE anywhere; on ``sessions`` only the
lease, status and outcome columns). It is made NOLOGIN: ``python -m scheduler migrate``
gives it a login and the password of ``SWARM_VERIFY_DATABASE_URL`` when that is set.

Roles belong to the whole cluster, grants to one database: the role is made only if it is
missing (and a concurrent migration of another database making it too is no error), the
grants are made here, and a downgrade revokes this database's grants and drops the role
only once no database holds a grant for it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The verify worker's role (cluster-wide).
VERIFY_ROLE = "swarm_verify"
#: Tables the verify worker reads: the handoff, its run and wave, the fleet's id, the
#: sessions' runs (for its memory samples), the event log's last sequence number and the
#: outbox rows a finished wave leaves.
READS = (
    "fleet",
    "ladders",
    "runs",
    "waves",
    "sessions",
    "artifact_versions",
    "events",
    "outbox",
    "verifications",
)
#: Rows it adds: the verdict, a repair round's feedback event, the next wave's outbox row,
#: its process's memory samples.
INSERTS = ("verifications", "events", "outbox", "samples")
#: Columns it changes: the session's lease and state, the wave barrier, the run's and the
#: ladder's ending, the outbox row it dispatched.
UPDATES = {
    "sessions": (
        "lease_epoch",
        "lease_owner",
        "lease_expires_at",
        "dispatched_at",
        "status",
        "outcome",
        "error",
        "repair_round",
        "started_at",
        "finished_at",
    ),
    "waves": ("done_count", "status", "started_at", "finished_at"),
    "runs": ("status", "stop_reason", "started_at", "finished_at"),
    "ladders": ("status", "finished_at"),
    "outbox": ("dispatched_at",),
}


def upgrade() -> None:
    with op.batch_alter_table("verifications") as batch:
        batch.add_column(sa.Column("video_mp4", sa.LargeBinary(), nullable=True))
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        f"""
        DO $$
        BEGIN
            IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{VERIFY_ROLE}') THEN
                CREATE ROLE {VERIFY_ROLE} NOLOGIN;
            END IF;
        EXCEPTION
            WHEN duplicate_object OR unique_violation THEN
                NULL;  -- another database's migration made it meanwhile
            WHEN insufficient_privilege THEN
                RAISE WARNING 'no CREATEROLE: the verify worker cannot have a role of its own';
        END
        $$
        """
    )
    exists = op.get_bind().execute(
        sa.text("SELECT 1 FROM pg_roles WHERE rolname = :role"), {"role": VERIFY_ROLE}
    )
    if exists.first() is None:
        return
    op.execute(
        f"""
        DO $$
        BEGIN
            EXECUTE format('GRANT CONNECT ON DATABASE %I TO {VERIFY_ROLE}', current_database());
        END
        $$
        """
    )
    op.execute(f"GRANT USAGE ON SCHEMA public TO {VERIFY_ROLE}")
    op.execute(f"GRANT SELECT ON {', '.join(READS)} TO {VERIFY_ROLE}")
    op.execute(f"GRANT INSERT ON {', '.join(INSERTS)} TO {VERIFY_ROLE}")
    for table in INSERTS:
        op.execute(
            f"""
            DO $$
            BEGIN
                EXECUTE format('GRANT USAGE ON SEQUENCE %s TO {VERIFY_ROLE}',
                               pg_get_serial_sequence('{table}', 'id'));
            END
            $$
            """
        )
    for table, columns in UPDATES.items():
        op.execute(f"GRANT UPDATE ({', '.join(columns)}) ON {table} TO {VERIFY_ROLE}")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            f"""
            DO $$
            BEGIN
                IF EXISTS (SELECT FROM pg_roles WHERE rolname = '{VERIFY_ROLE}') THEN
                    -- This database's grants only: other databases keep theirs.
                    EXECUTE 'REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {VERIFY_ROLE}';
                    EXECUTE 'REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM {VERIFY_ROLE}';
                    EXECUTE 'REVOKE USAGE ON SCHEMA public FROM {VERIFY_ROLE}';
                    EXECUTE format('REVOKE CONNECT ON DATABASE %I FROM {VERIFY_ROLE}',
                                   current_database());
                    IF NOT EXISTS (
                        SELECT FROM pg_shdepend d JOIN pg_roles r ON r.oid = d.refobjid
                        WHERE r.rolname = '{VERIFY_ROLE}'
                    ) THEN
                        DROP ROLE {VERIFY_ROLE};
                    END IF;
                END IF;
            EXCEPTION WHEN dependent_objects_still_exist OR undefined_object THEN
                NULL;  -- another database granted it something meanwhile, or dropped it
            END
            $$
            """
        )
    with op.batch_alter_table("verifications") as batch:
        batch.drop_column("video_mp4")
