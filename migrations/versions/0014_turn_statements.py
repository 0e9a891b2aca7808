"""the timing ledger counts each turn's statements and round trips to PostgreSQL

``turn_timings`` gets ``statements`` and ``round_trips``: what the turn sent before its
commit statement (which writes the row). Rows written before, and rows on SQLite, have
neither.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03 18:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("turn_timings") as batch:
        batch.add_column(sa.Column("statements", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("round_trips", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("turn_timings") as batch:
        batch.drop_column("round_trips")
        batch.drop_column("statements")
