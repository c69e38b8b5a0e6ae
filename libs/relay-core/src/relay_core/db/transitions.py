"""Status changes: a compare-and-set on the row plus one event row, in the caller's unit of
work. Every writer (API, consumer, reaper, webhooks, tracker) goes through here, so the
version always grows and the audit trail always matches the row."""

from __future__ import annotations

from typing import Any

from sqlalchemy import insert, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm.attributes import set_committed_value

from relay_core.db.models import Notification, Transaction, TransactionEvent, utcnow
from relay_core.views import rfc3339


async def transition(
    session: AsyncSession,
    tx: Transaction,
    new_status: str,
    *,
    source: str,
    reason: str | None = None,
    **values: Any,
) -> bool:
    """Move ``tx`` (as last read) to ``new_status`` if nobody changed it since.

    Returns False when the row moved on meanwhile (the caller reloads and decides again).
    On success ``tx`` is updated in place to the new state, including its version.
    """
    now = values.pop("updated_at", None) or utcnow()
    changes = {"status": new_status, "version": tx.version + 1, "updated_at": now, **values}
    result = await session.execute(
        update(Transaction)
        .where(Transaction.id == tx.id, Transaction.version == tx.version)
        .values(**changes)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        return False
    if new_status != tx.status:
        await session.execute(
            insert(TransactionEvent).values(
                transaction_id=tx.id,
                from_status=tx.status,
                to_status=new_status,
                source=source,
                reason=reason,
                created_at=now,
            )
        )
        if tx.callback_url:
            # The client's notification is written with the change it reports (an outbox),
            # so it is sent if and only if the change committed.
            await session.execute(
                insert(Notification).values(
                    transaction_id=tx.id,
                    client_id=tx.client_id,
                    url=tx.callback_url,
                    payload={
                        "event": "transaction.status_changed",
                        "transactionId": tx.id,
                        "status": new_status,
                        "hash": changes.get("hash", tx.hash),
                        "timestamp": rfc3339(now),
                    },
                    next_attempt_at=now,
                    created_at=now,
                )
            )
    for key, value in changes.items():
        # The database already has these values; do not let the ORM flush them again.
        set_committed_value(tx, key, value)
    return True


async def touch(session: AsyncSession, tx: Transaction, **values: Any) -> bool:
    """Change fields without a status change (still a new version, no event)."""
    return await transition(session, tx, tx.status, source="", **values)
