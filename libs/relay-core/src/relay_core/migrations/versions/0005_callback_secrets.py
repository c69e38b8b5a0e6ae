"""every client has a callback signing secret (Standard Webhooks form)

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23 23:00:00

A transaction may name a callbackUrl whatever its client registered, and a notification is
never signed with an empty key: clients without a secret get one here (their operator shows
it with `relay clients rotate-callback-secret`, which makes a new one).
"""

import base64
import secrets
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if context.is_offline_mode():
        return
    bind = op.get_bind()
    ids = [row[0] for row in bind.execute(sa.text(
        "SELECT id FROM api_clients WHERE callback_secret IS NULL"
    ))]
    for client_id in ids:
        secret = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
        bind.execute(
            sa.text("UPDATE api_clients SET callback_secret = :s WHERE id = :i"),
            {"s": secret, "i": client_id},
        )


def downgrade() -> None:
    pass  # the secrets stay: nothing to undo
