"""a run may be a fork: the session it came from, and the turn it went live at

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 02:50:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("forked_from_session_id", _BIG_ID, nullable=True))
        batch.add_column(sa.Column("forked_at_turn", sa.Integer(), nullable=True))
        # A fork outlives its origin's deletion: it keeps its own copy of the history.
        batch.create_foreign_key(
            "fk_runs_forked_from_session_id_sessions",
            "sessions",
            ["forked_from_session_id"],
            ["id"],
            ondelete="SET NULL",
        )
        batch.create_index("ix_runs_forked_from_session_id", ["forked_from_session_id"])


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_index("ix_runs_forked_from_session_id")
        batch.drop_constraint("fk_runs_forked_from_session_id_sessions", type_="foreignkey")
        batch.drop_column("forked_at_turn")
        batch.drop_column("forked_from_session_id")
