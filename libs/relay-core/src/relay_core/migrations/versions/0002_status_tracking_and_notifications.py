"""status tracking and notifications

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 03:19:55.790367
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "webhook_receipts",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("received_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_receipts")),
    )
    op.create_table(
        "notifications",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("transaction_id", sa.String(length=36), nullable=False),
        sa.Column("client_id", sa.String(length=36), nullable=False),
        sa.Column("url", sa.String(length=2048), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("next_attempt_at", TIMESTAMP, nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("delivered_at", TIMESTAMP, nullable=True),
        sa.ForeignKeyConstraint(
            ["transaction_id"],
            ["transactions.id"],
            name=op.f("fk_notifications_transaction_id_transactions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notifications")),
    )
    op.create_index(
        op.f("ix_notifications_state_next_attempt_at"),
        "notifications",
        ["state", "next_attempt_at"],
        unique=False,
    )
    op.create_index(
        op.f("ix_notifications_transaction_id_id"),
        "notifications",
        ["transaction_id", "id"],
        unique=False,
    )
    op.add_column("api_clients", sa.Column("callback_url", sa.String(length=2048), nullable=True))
    op.add_column("api_clients", sa.Column("callback_secret", sa.String(length=128), nullable=True))
    op.add_column("transactions", sa.Column("last_synced_at", TIMESTAMP, nullable=True))
    op.add_column("transactions", sa.Column("callback_url", sa.String(length=2048), nullable=True))
    op.create_index(
        op.f("ix_transactions_executor_tx_id"), "transactions", ["executor_tx_id"], unique=False
    )
    op.create_index(
        op.f("ix_transactions_status_last_synced_at"),
        "transactions",
        ["status", "last_synced_at"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_transactions_status_last_synced_at"), table_name="transactions")
    op.drop_index(op.f("ix_transactions_executor_tx_id"), table_name="transactions")
    op.drop_column("transactions", "callback_url")
    op.drop_column("transactions", "last_synced_at")
    op.drop_column("api_clients", "callback_secret")
    op.drop_column("api_clients", "callback_url")
    op.drop_index(op.f("ix_notifications_transaction_id_id"), table_name="notifications")
    op.drop_index(op.f("ix_notifications_state_next_attempt_at"), table_name="notifications")
    op.drop_table("notifications")
    op.drop_table("webhook_receipts")
