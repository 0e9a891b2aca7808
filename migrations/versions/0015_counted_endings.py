"""a session's ending is counted on its wave in a statement of its own, once

``sessions.counted`` says whether a session's ending is counted in its wave's
``done_count``. The count used to be made in the ending's own transaction, which kept the
wave's row locked until that transaction's commit came back from its worker; now the count
is made after the commit, marking the session counted in the same statement, and a
reconciler counts what a dead worker left (``ix_sessions_uncounted`` finds those).

Every session that has ended before this revision was counted then.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06 06:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The verify worker's role (made by revision 0006): it ends the sessions it verifies.
VERIFY_ROLE = "swarm_verify"
#: Session states after which nothing more happens.
TERMINAL = ("cancelled", "error", "failed", "stopped", "succeeded")
#: Which sessions the index holds.
UNCOUNTED = "NOT counted AND finished_at IS NOT NULL"


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(
            sa.Column("counted", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    terminal = ", ".join(f"'{status}'" for status in TERMINAL)
    op.execute(f"UPDATE sessions SET counted = true WHERE status IN ({terminal})")
    op.create_index(
        "ix_sessions_uncounted",
        "sessions",
        ["finished_at"],
        postgresql_where=sa.text(UNCOUNTED),
        sqlite_where=sa.text(UNCOUNTED),
    )
    _on_verify_role(f"GRANT UPDATE (counted) ON sessions TO {VERIFY_ROLE}")


def downgrade() -> None:
    _on_verify_role(f"REVOKE UPDATE (counted) ON sessions FROM {VERIFY_ROLE}")
    op.drop_index("ix_sessions_uncounted", table_name="sessions")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("counted")


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
