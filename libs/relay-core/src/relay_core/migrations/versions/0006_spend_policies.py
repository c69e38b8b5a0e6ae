"""spend policies: per-client limits on what the relayer's wallet pays, and the daily budget's
reservations (relay_core.policy)

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Timestamp = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    with op.batch_alter_table("api_clients") as batch:
        batch.add_column(sa.Column("policy_allowed_to", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("policy_max_value_wei", sa.String(78), nullable=True))
        batch.add_column(sa.Column("policy_daily_value_wei", sa.String(78), nullable=True))
        batch.add_column(sa.Column("policy_max_gas", sa.BigInteger(), nullable=True))
        batch.add_column(
            sa.Column("policy_gasless_value", sa.Boolean(), nullable=False, server_default="0")
        )
        batch.add_column(
            sa.Column("policy_spend_lock", sa.Integer(), nullable=False, server_default="0")
        )
    op.create_table(
        "client_spend",
        sa.Column("client_id", sa.String(36), nullable=False),
        sa.Column("bucket", Timestamp, nullable=False),
        sa.Column("value_wei", sa.String(80), nullable=False),
        sa.ForeignKeyConstraint(
            ["client_id"], ["api_clients.id"], name="fk_client_spend_client_id_api_clients"
        ),
        sa.PrimaryKeyConstraint("client_id", "bucket", name="pk_client_spend"),
    )


def downgrade() -> None:
    op.drop_table("client_spend")
    with op.batch_alter_table("api_clients") as batch:
        for column in (
            "policy_spend_lock",
            "policy_gasless_value",
            "policy_max_gas",
            "policy_daily_value_wei",
            "policy_max_value_wei",
            "policy_allowed_to",
        ):
            batch.drop_column(column)
