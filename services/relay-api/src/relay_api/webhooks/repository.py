"""SQL for executor webhooks."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from relay_core.db.models import Transaction, WebhookReceipt


async def record_receipt(session: AsyncSession, webhook_id: str) -> None:
    """Raises IntegrityError when this webhook was applied before."""
    session.add(WebhookReceipt(id=webhook_id))
    await session.flush()


async def by_executor_id(session: AsyncSession, executor_tx_id: str) -> Transaction | None:
    return (
        await session.execute(
            select(Transaction).where(Transaction.executor_tx_id == executor_tx_id)
        )
    ).scalar_one_or_none()
