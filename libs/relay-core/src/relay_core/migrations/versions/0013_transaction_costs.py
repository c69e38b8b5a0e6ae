"""what every transaction on chain cost, not only those with a fee reserved: an index for the
consumer's pass that reads the receipts of those whose cost is still unknown

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-28 09:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("transactions") as batch:
        batch.create_index(
            "ix_transactions_status_fee_wei_updated_at", ["status", "fee_wei", "updated_at"]
        )


def downgrade() -> None:
    with op.batch_alter_table("transactions") as batch:
        batch.drop_index("ix_transactions_status_fee_wei_updated_at")
