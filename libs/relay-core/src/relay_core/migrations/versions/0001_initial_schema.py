"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-22 02:38:08.540305
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Microsecond timestamps on MySQL/MariaDB; plain DATETIME elsewhere (SQLite).
TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "api_clients",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("key_prefix", sa.String(length=16), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("revoked_at", TIMESTAMP, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_clients")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_api_clients_key_hash")),
    )
    op.create_table(
        "transactions",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("client_id", sa.String(length=36), nullable=False),
        sa.Column("type", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("request", sa.JSON(), nullable=False),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("hash", sa.String(length=66), nullable=True),
        sa.Column("executor_tx_id", sa.String(length=64), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=255), nullable=True),
        sa.Column("request_fingerprint", sa.String(length=64), nullable=False),
        sa.Column("inflight_key", sa.String(length=130), nullable=True),
        sa.Column("valid_until", TIMESTAMP, nullable=True),
        sa.Column("enqueued_at", TIMESTAMP, nullable=True),
        sa.Column("claimed_by", sa.String(length=64), nullable=True),
        sa.Column("claimed_at", TIMESTAMP, nullable=True),
        sa.Column("submit_started_at", TIMESTAMP, nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.Column("submitted_at", TIMESTAMP, nullable=True),
        sa.Column("confirmed_at", TIMESTAMP, nullable=True),
        sa.ForeignKeyConstraint(
            ["client_id"], ["api_clients.id"], name=op.f("fk_transactions_client_id_api_clients")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_transactions")),
        sa.UniqueConstraint(
            "client_id", "idempotency_key", name=op.f("uq_transactions_client_id_idempotency_key")
        ),
        sa.UniqueConstraint("inflight_key", name=op.f("uq_transactions_inflight_key")),
    )
    op.create_index(
        op.f("ix_transactions_client_id_created_at"),
        "transactions",
        ["client_id", "created_at"],
        unique=False,
    )
    op.create_index(
        op.f("ix_transactions_created_at"), "transactions", ["created_at"], unique=False
    )
    op.create_index(
        op.f("ix_transactions_status_enqueued_at_created_at"),
        "transactions",
        ["status", "enqueued_at", "created_at"],
        unique=False,
    )
    op.create_index(
        op.f("ix_transactions_status_updated_at"),
        "transactions",
        ["status", "updated_at"],
        unique=False,
    )
    op.create_table(
        "transaction_events",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("transaction_id", sa.String(length=36), nullable=False),
        sa.Column("from_status", sa.String(length=16), nullable=True),
        sa.Column("to_status", sa.String(length=16), nullable=False),
        sa.Column("source", sa.String(length=32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.ForeignKeyConstraint(
            ["transaction_id"],
            ["transactions.id"],
            name=op.f("fk_transaction_events_transaction_id_transactions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_transaction_events")),
    )
    op.create_index(
        op.f("ix_transaction_events_created_at"), "transaction_events", ["created_at"], unique=False
    )
    op.create_index(
        op.f("ix_transaction_events_transaction_id_id"),
        "transaction_events",
        ["transaction_id", "id"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_transaction_events_transaction_id_id"), table_name="transaction_events")
    op.drop_index(op.f("ix_transaction_events_created_at"), table_name="transaction_events")
    op.drop_table("transaction_events")
    op.drop_index(op.f("ix_transactions_status_updated_at"), table_name="transactions")
    op.drop_index(op.f("ix_transactions_status_enqueued_at_created_at"), table_name="transactions")
    op.drop_index(op.f("ix_transactions_created_at"), table_name="transactions")
    op.drop_index(op.f("ix_transactions_client_id_created_at"), table_name="transactions")
    op.drop_table("transactions")
    op.drop_table("api_clients")
