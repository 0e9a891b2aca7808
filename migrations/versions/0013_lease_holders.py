"""a lease lives as long as its worker: one row per worker is renewed, not every lease

A worker renewed every lease it held, one session row each, every few seconds: at 10,000
sessions in flight with minute-long model calls, thousands of rows a second rewritten for
no change but a time. Now each worker process renews one row of ``lease_holders`` (its
owner name and until when it is alive), and a lease whose own expiry has passed is still
held while its owner's row is alive. A worker lets go of a lease it stopped holding without
a commit by clearing the lease's owner.

The verify role holds the leases of its verifications: it may read and write this table.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03 17:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The verify worker's role (made by revision 0006).
VERIFY_ROLE = "swarm_verify"


def upgrade() -> None:
    op.create_table(
        "lease_holders",
        sa.Column("owner", sa.String(128), nullable=False),
        sa.Column("alive_until", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("owner", name=op.f("pk_lease_holders")),
    )
    _on_verify_role(f"GRANT SELECT, INSERT, UPDATE ON lease_holders TO {VERIFY_ROLE}")


def downgrade() -> None:
    _on_verify_role(f"REVOKE SELECT, INSERT, UPDATE ON lease_holders FROM {VERIFY_ROLE}")
    op.drop_table("lease_holders")


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
