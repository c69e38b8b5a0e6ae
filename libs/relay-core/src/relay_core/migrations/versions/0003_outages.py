"""outages: one row per executor transaction, retry budget start, executor-missing marker

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23 20:10:00

Adds ``first_attempt_at`` (the retry budget counts from it), ``upstream_missing_since`` (the
executor answered 404) and ``dead_letters`` (the reconciler found the message dead-lettered).
``transactions.executor_tx_id`` becomes unique (it was a plain index): two rows adopting the same
executor record is the double-adoption bug this revision closes. An existing database holding
such a pair cannot take the constraint; the upgrade names the pairs and stops instead of
guessing which row is right (settle them by hand, then upgrade again).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op
from sqlalchemy.dialects import mysql

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def _refuse_duplicates() -> None:
    if context.is_offline_mode():  # --sql: nothing to read; the constraint itself will refuse
        return
    duplicates = (
        op.get_bind()
        .execute(
            sa.text(
                "SELECT executor_tx_id, COUNT(*) FROM transactions WHERE executor_tx_id IS NOT NULL"
                " GROUP BY executor_tx_id HAVING COUNT(*) > 1 LIMIT 20"
            )
        )
        .fetchall()
    )
    if duplicates:
        listed = ", ".join(f"{row[0]} ({row[1]} rows)" for row in duplicates)
        raise RuntimeError(
            "transactions.executor_tx_id must become unique, but these executor transactions are "
            f"recorded against several rows: {listed}. Decide which row each belongs to, clear "
            "executor_tx_id on the others (and let the consumer decide them afresh), then run the "
            "upgrade again."
        )


def upgrade() -> None:
    _refuse_duplicates()
    if op.get_context().dialect.name in ("mysql", "mariadb"):
        # One ALTER: MySQL commits each DDL statement, and a half-done upgrade (the plain index
        # dropped, the unique one refused) could not simply be run again.
        op.execute(
            "ALTER TABLE transactions DROP INDEX ix_transactions_executor_tx_id, "
            "ADD CONSTRAINT uq_transactions_executor_tx_id UNIQUE (executor_tx_id), "
            "ADD COLUMN first_attempt_at DATETIME(6) NULL, "
            "ADD COLUMN upstream_missing_since DATETIME(6) NULL, "
            "ADD COLUMN dead_letters INTEGER NOT NULL DEFAULT '0', "
            "ADD INDEX ix_transactions_upstream_missing_since (upstream_missing_since)"
        )
        return
    with op.batch_alter_table("transactions") as batch:  # SQLite: a copy, in one transaction
        batch.add_column(sa.Column("first_attempt_at", TIMESTAMP, nullable=True))
        batch.add_column(sa.Column("upstream_missing_since", TIMESTAMP, nullable=True))
        batch.add_column(
            sa.Column("dead_letters", sa.Integer(), nullable=False, server_default="0")
        )
        batch.drop_index("ix_transactions_executor_tx_id")
        batch.create_unique_constraint("uq_transactions_executor_tx_id", ["executor_tx_id"])
        batch.create_index(
            "ix_transactions_upstream_missing_since", ["upstream_missing_since"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("transactions") as batch:
        batch.drop_index("ix_transactions_upstream_missing_since")
        batch.drop_constraint("uq_transactions_executor_tx_id", type_="unique")
        batch.create_index("ix_transactions_executor_tx_id", ["executor_tx_id"], unique=False)
        batch.drop_column("dead_letters")
        batch.drop_column("upstream_missing_since")
        batch.drop_column("first_attempt_at")
