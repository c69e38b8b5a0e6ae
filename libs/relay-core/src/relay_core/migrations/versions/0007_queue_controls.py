"""queue controls: an operator's pause/drain switch per lane, and what each consumer reports
of itself (relay_core.controls)

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24 12:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Timestamp = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "queue_controls",
        sa.Column("lane", sa.String(32), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(500), nullable=True),
        sa.Column("changed_by", sa.String(100), nullable=False),
        sa.Column("changed_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("lane", name="pk_queue_controls"),
    )
    op.create_table(
        "consumer_reports",
        sa.Column("consumer_id", sa.String(200), nullable=False),
        sa.Column("lane", sa.String(32), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("in_flight", sa.Integer(), nullable=False),
        sa.Column("received", sa.BigInteger(), nullable=False),
        sa.Column("circuit", sa.String(16), nullable=False),
        sa.Column("started_at", Timestamp, nullable=False),
        sa.Column("seen_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("consumer_id", name="pk_consumer_reports"),
    )


def downgrade() -> None:
    op.drop_table("consumer_reports")
    op.drop_table("queue_controls")
