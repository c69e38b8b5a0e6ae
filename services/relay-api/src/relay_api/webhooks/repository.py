"""SQL for executor webhooks."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from relay_core.db.models import Transaction, WebhookReceipt


async def record_receipt(session: AsyncSession, webhook_id: str) -> None:
    """Raises IntegrityError when this webhook was applied before."""
    session.add(WebhookReceipt(id=webhook_id))
    await session.flush()


async def forget_receipts(session: AsyncSession, before: datetime, limit: int) -> int:
    """Delete at most ``limit`` receipts older than ``before``; returns how many."""
    ids = list(
        (
            await session.execute(
                select(WebhookReceipt.id).where(WebhookReceipt.received_at < before).limit(limit)
            )
        ).scalars()
    )
    if ids:
        await session.execute(delete(WebhookReceipt).where(WebhookReceipt.id.in_(ids)))
    return len(ids)


async def by_executor_id(session: AsyncSession, executor_tx_id: str) -> Transaction | None:
    return (
        await session.execute(
            select(Transaction).where(Transaction.executor_tx_id == executor_tx_id)
        )
    ).scalar_one_or_none()
