"""the relayer pool: the relayer each transaction was sent to, an operator's switch per
relayer, and what the consumers last saw of each

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27 01:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Timestamp = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    with op.batch_alter_table("transactions") as batch:
        batch.add_column(sa.Column("relayer", sa.String(64), nullable=True))
        batch.create_index(
            "ix_transactions_status_relayer_submitted_at", ["status", "relayer", "submitted_at"]
        )
    op.create_table(
        "relayer_controls",
        sa.Column("relayer", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(500), nullable=True),
        sa.Column("changed_by", sa.String(100), nullable=False),
        sa.Column("changed_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("relayer", name="pk_relayer_controls"),
    )
    op.create_table(
        "relayer_reports",
        sa.Column("relayer", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("detail", sa.String(500), nullable=True),
        sa.Column("submitted", sa.Integer(), nullable=False),
        sa.Column("oldest_submitted_at", Timestamp, nullable=True),
        sa.Column("balance_wei", sa.String(78), nullable=True),
        sa.Column("balance_at", Timestamp, nullable=True),
        sa.Column("last_mined_at", Timestamp, nullable=True),
        sa.Column("seen_by", sa.String(200), nullable=False),
        sa.Column("seen_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("relayer", name="pk_relayer_reports"),
    )


def downgrade() -> None:
    op.drop_table("relayer_reports")
    op.drop_table("relayer_controls")
    with op.batch_alter_table("transactions") as batch:
        batch.drop_index("ix_transactions_status_relayer_submitted_at")
        batch.drop_column("relayer")
