"""ladders, run tiers and stop reasons, model retries

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 02:18:53.453823
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "ladders",
        sa.Column("id", _ID, nullable=False),
        sa.Column("model", sa.String(length=64), nullable=False),
        sa.Column("tiers", sa.JSON(), nullable=False),
        sa.Column("profiles", sa.JSON(), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ladders")),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("ladder_id", _ID, nullable=True))
        batch_op.add_column(sa.Column("tier", sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column("stop_reason", sa.Text(), nullable=True))
        batch_op.create_index(batch_op.f("ix_runs_ladder_id"), ["ladder_id"], unique=False)
        batch_op.create_foreign_key(
            batch_op.f("fk_runs_ladder_id_ladders"),
            "ladders",
            ["ladder_id"],
            ["id"],
            ondelete="CASCADE",
        )
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        # Sessions that exist already have had no counted retries.
        batch_op.add_column(
            sa.Column("model_retries", sa.Integer(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.drop_column("model_retries")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("fk_runs_ladder_id_ladders"), type_="foreignkey")
        batch_op.drop_index(batch_op.f("ix_runs_ladder_id"))
        batch_op.drop_column("stop_reason")
        batch_op.drop_column("tier")
        batch_op.drop_column("ladder_id")
    op.drop_table("ladders")
