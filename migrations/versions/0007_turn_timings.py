"""a timing ledger per committed turn, and a count of turn tasks that found nothing to do

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 02:55:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Milliseconds of each phase; the first and the dispatch are unknown for some turns.
_PHASES = {
    "queue_ms": True,
    "claim_ms": False,
    "rebuild_ms": False,
    "model_ms": False,
    "tools_ms": False,
    "commit_ms": False,
    "dispatch_ms": True,
    "cpu_ms": False,
}


def upgrade() -> None:
    big_id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "turn_timings",
        sa.Column("id", big_id, nullable=False),
        sa.Column("run_id", big_id, nullable=False),
        sa.Column("session_id", big_id, nullable=False),
        sa.Column("turn_no", sa.Integer(), nullable=False),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=False),
        *[sa.Column(name, sa.Float(), nullable=null) for name, null in _PHASES.items()],
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_turn_timings_run_id_runs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name=op.f("fk_turn_timings_session_id_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_turn_timings")),
        sa.UniqueConstraint(
            "session_id", "turn_no", name=op.f("uq_turn_timings_session_id_turn_no")
        ),
    )
    op.create_index(op.f("ix_turn_timings_run_id"), "turn_timings", ["run_id"])
    with op.batch_alter_table("runs") as batch:
        batch.add_column(
            sa.Column("duplicate_turn_tasks", sa.Integer(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("duplicate_turn_tasks")
    op.drop_index(op.f("ix_turn_timings_run_id"), table_name="turn_timings")
    op.drop_table("turn_timings")
