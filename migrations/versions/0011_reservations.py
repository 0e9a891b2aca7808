"""a run's budget holds each model call's worst-case cost before the call is sent

A run with a budget keeps what it spent (``spent_usd``, the dollars of its usage rows) and
what its calls in flight may still cost (``reserved_usd``) on its row; each call's hold is a
row of ``reservations``, keyed by the turn's lease. Runs made before keep their spending
counted from their usage rows. The timing ledger gets the reservation's wall time and CPU.

The verify role releases a session's holds when a verdict ends it, and a run's when its last
session ends: it may read and delete reservations and change ``runs.reserved_usd``.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03 09:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The verify worker's role (made by revision 0006).
VERIFY_ROLE = "swarm_verify"


def upgrade() -> None:
    big_id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("spent_usd", sa.Float(), nullable=True))
        batch.add_column(sa.Column("reserved_usd", sa.Float(), nullable=True))
    op.execute(
        "UPDATE runs SET reserved_usd = 0, spent_usd = (SELECT COALESCE(SUM(usage.cost_usd), 0)"
        " FROM usage WHERE usage.run_id = runs.id) WHERE budget_usd IS NOT NULL"
    )
    op.create_table(
        "reservations",
        sa.Column("id", big_id, nullable=False),
        sa.Column("run_id", big_id, nullable=False),
        sa.Column("session_id", big_id, nullable=False),
        sa.Column("turn_no", sa.Integer(), nullable=False),
        sa.Column("lease_epoch", sa.Integer(), nullable=False),
        sa.Column("amount_usd", sa.Float(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False, server_default="held"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_reservations_run_id_runs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name=op.f("fk_reservations_session_id_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reservations")),
        sa.UniqueConstraint(
            "session_id",
            "turn_no",
            "lease_epoch",
            name=op.f("uq_reservations_session_id_turn_no_lease_epoch"),
        ),
    )
    op.create_index(op.f("ix_reservations_run_id"), "reservations", ["run_id"])
    with op.batch_alter_table("turn_timings") as batch:
        batch.add_column(sa.Column("reserve_ms", sa.Float(), nullable=True))
        batch.add_column(sa.Column("reserve_cpu_ms", sa.Float(), nullable=True))
    _on_verify_role(f"GRANT SELECT, DELETE ON reservations TO {VERIFY_ROLE}")
    _on_verify_role(f"GRANT UPDATE (reserved_usd) ON runs TO {VERIFY_ROLE}")


def downgrade() -> None:
    _on_verify_role(f"REVOKE UPDATE (reserved_usd) ON runs FROM {VERIFY_ROLE}")
    _on_verify_role(f"REVOKE SELECT, DELETE ON reservations FROM {VERIFY_ROLE}")
    with op.batch_alter_table("turn_timings") as batch:
        batch.drop_column("reserve_cpu_ms")
        batch.drop_column("reserve_ms")
    op.drop_index(op.f("ix_reservations_run_id"), table_name="reservations")
    op.drop_table("reservations")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("reserved_usd")
        batch.drop_column("spent_usd")


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
