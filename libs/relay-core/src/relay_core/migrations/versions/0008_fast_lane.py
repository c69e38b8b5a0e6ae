"""the fast lane: each transaction's lane, and consumer reports per lane

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24 05:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Timestamp = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def _reports(primary_key: tuple[str, ...]) -> None:
    # Reports are rewritten every few seconds by each running consumer: a new table loses
    # nothing worth keeping, and SQLite cannot change a primary key in place.
    op.drop_table("consumer_reports")
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
        sa.PrimaryKeyConstraint(*primary_key, name="pk_consumer_reports"),
    )


def upgrade() -> None:
    with op.batch_alter_table("transactions") as batch:
        batch.add_column(
            sa.Column("lane", sa.String(8), nullable=False, server_default="normal")
        )
    _reports(("consumer_id", "lane"))


def downgrade() -> None:
    _reports(("consumer_id",))
    with op.batch_alter_table("transactions") as batch:
        batch.drop_column("lane")
