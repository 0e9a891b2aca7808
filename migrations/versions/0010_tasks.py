"""a run records its task; a session its instance and epoch

A run works on one task, named by the reference it was loaded with (an entry point's name or
``package.module:factory``), with the task's name, version and the SHA-256 of its
configuration, so that a replay or a fork loads the same task and refuses one that changed,
and with the kind of verifier that judges it (which decides the verify queue). A session
records the instance it works on and the epoch (how many times the run played that instance
before it). Runs made before tasks were the dashboard's.

The verify role may now read which files a session has (their names and versions, never
their current content): a verdict judges the whole workspace a session handed off.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02 18:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The verify worker's role (made by revision 0006).
VERIFY_ROLE = "swarm_verify"
#: What the verify role reads of ``artifacts``: which files a session has, not their text.
ARTIFACT_COLUMNS = ("id", "session_id", "name", "version", "deleted_at")


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(
            sa.Column("task", sa.String(64), nullable=False, server_default="dashboard")
        )
        batch.add_column(
            sa.Column("task_ref", sa.String(256), nullable=False, server_default="dashboard")
        )
        batch.add_column(
            sa.Column("task_version", sa.String(32), nullable=False, server_default="1")
        )
        batch.add_column(sa.Column("task_sha256", sa.String(64), nullable=True))
        batch.add_column(
            sa.Column("verifier", sa.String(16), nullable=False, server_default="chromium")
        )
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(
            sa.Column("instance_id", sa.String(128), nullable=False, server_default="")
        )
        batch.add_column(sa.Column("epoch", sa.Integer(), nullable=False, server_default="0"))
    _on_verify_role(f"GRANT SELECT ({', '.join(ARTIFACT_COLUMNS)}) ON artifacts TO {VERIFY_ROLE}")


def downgrade() -> None:
    _on_verify_role(
        f"REVOKE SELECT ({', '.join(ARTIFACT_COLUMNS)}) ON artifacts FROM {VERIFY_ROLE}"
    )
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("epoch")
        batch.drop_column("instance_id")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("verifier")
        batch.drop_column("task_sha256")
        batch.drop_column("task_version")
        batch.drop_column("task_ref")
        batch.drop_column("task")


def _on_verify_role(statement: str) -> None:
    """Run ``statement`` on PostgreSQL when the verify role exists (0006 may not have made it)."""
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        f"""
        DO $$
        BEGIN
            IF EXISTS (SELECT FROM pg_roles WHERE rolname = '{VERIFY_ROLE}') THEN
                EXECUTE '{statement}';
            END IF;
        END
        $$
        """
    )
