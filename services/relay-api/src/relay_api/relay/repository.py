"""SQL for transactions on the API side."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from relay_core.db.models import Transaction


async def add(session: AsyncSession, tx: Transaction) -> None:
    session.add(tx)
    await session.flush()


async def by_id(session: AsyncSession, transaction_id: str) -> Transaction | None:
    return await session.get(Transaction, transaction_id)


async def by_idempotency_key(session: AsyncSession, client_id: str, key: str) -> Transaction | None:
    return (
        await session.execute(
            select(Transaction).where(
                Transaction.client_id == client_id, Transaction.idempotency_key == key
            )
        )
    ).scalar_one_or_none()
