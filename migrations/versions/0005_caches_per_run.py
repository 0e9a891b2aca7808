"""a run may make its explicit cache more than once

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 01:40:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A cache that expired or was evicted is made again: each one keeps its row, so the
    # storage of every cache the run paid for is counted.
    with op.batch_alter_table("caches") as batch:
        batch.drop_constraint("uq_caches_run_id", type_="unique")
        batch.create_index("ix_caches_run_id", ["run_id"])


def downgrade() -> None:
    caches = sa.table("caches", sa.column("id"), sa.column("run_id"))
    newest = sa.select(sa.func.max(caches.c.id)).group_by(caches.c.run_id)
    op.execute(sa.delete(caches).where(caches.c.id.not_in(newest)))
    with op.batch_alter_table("caches") as batch:
        batch.drop_index("ix_caches_run_id")
        batch.create_unique_constraint("uq_caches_run_id", ["run_id"])
