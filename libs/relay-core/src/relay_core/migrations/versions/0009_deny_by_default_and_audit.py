"""deny by default: a client spends nothing until an operator grants it a policy; the audit
log of admin and operator actions

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26 17:00:00
"""

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Timestamp = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("api_clients") as batch:
        batch.add_column(sa.Column("policy_granted_at", Timestamp, nullable=True))
        batch.add_column(sa.Column("policy_granted_by", sa.String(200), nullable=True))
    # Nobody is cut off by the upgrade: every existing client keeps the policy it had in
    # effect (limits or none), as granted by the upgrade. `relay clients show` and the
    # dashboard flag those without limits.
    clients = sa.table(
        "api_clients",
        sa.column("policy_granted_at", Timestamp),
        sa.column("policy_granted_by", sa.String(200)),
    )
    op.execute(
        clients.update().values(
            policy_granted_at=datetime.now(UTC).replace(tzinfo=None),
            policy_granted_by="the upgrade to deny-by-default (migration 0009)",
        )
    )
    op.create_table(
        "audit_log",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("at", Timestamp, nullable=False),
        sa.Column("actor_id", sa.String(36), nullable=True),
        sa.Column("actor_name", sa.String(200), nullable=False),
        sa.Column("actor_role", sa.String(16), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target_kind", sa.String(32), nullable=False),
        sa.Column("target_id", sa.String(200), nullable=True),
        sa.Column("target_name", sa.String(200), nullable=True),
        sa.Column("before", sa.JSON(), nullable=True),
        sa.Column("after", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_audit_log"),
    )
    op.create_index("ix_audit_log_at", "audit_log", ["at"])


def downgrade() -> None:
    op.drop_index("ix_audit_log_at", "audit_log")
    op.drop_table("audit_log")
    with op.batch_alter_table("api_clients") as batch:
        batch.drop_column("policy_granted_by")
        batch.drop_column("policy_granted_at")
