"""fee budgets: a client's fees per transaction and per day, the speeds it may use; each
transaction's reservation, and what it cost from its receipt; webhook receipts pruned by age

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26 18:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Timestamp = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    with op.batch_alter_table("api_clients") as batch:
        batch.add_column(sa.Column("policy_max_fee_wei", sa.String(78), nullable=True))
        batch.add_column(sa.Column("policy_daily_fee_wei", sa.String(78), nullable=True))
        batch.add_column(sa.Column("policy_speeds", sa.JSON(), nullable=True))
    with op.batch_alter_table("client_spend") as batch:
        batch.add_column(sa.Column("fee_wei", sa.String(80), nullable=False, server_default="0"))
    with op.batch_alter_table("transactions") as batch:
        batch.add_column(sa.Column("spend_bucket", Timestamp, nullable=True))
        batch.add_column(sa.Column("reserved_fee_wei", sa.String(78), nullable=True))
        batch.add_column(sa.Column("fee_settled_at", Timestamp, nullable=True))
        batch.add_column(sa.Column("block_number", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("gas_used", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("effective_gas_price", sa.String(78), nullable=True))
        batch.add_column(sa.Column("fee_wei", sa.String(78), nullable=True))
    op.create_index(
        "ix_transactions_status_reserved_fee_wei", "transactions", ["status", "reserved_fee_wei"]
    )
    op.create_index("ix_webhook_receipts_received_at", "webhook_receipts", ["received_at"])


def downgrade() -> None:
    op.drop_index("ix_webhook_receipts_received_at", "webhook_receipts")
    op.drop_index("ix_transactions_status_reserved_fee_wei", "transactions")
    with op.batch_alter_table("transactions") as batch:
        for column in (
            "fee_wei",
            "effective_gas_price",
            "gas_used",
            "block_number",
            "fee_settled_at",
            "reserved_fee_wei",
            "spend_bucket",
        ):
            batch.drop_column(column)
    with op.batch_alter_table("client_spend") as batch:
        batch.drop_column("fee_wei")
    with op.batch_alter_table("api_clients") as batch:
        batch.drop_column("policy_speeds")
        batch.drop_column("policy_daily_fee_wei")
        batch.drop_column("policy_max_fee_wei")
