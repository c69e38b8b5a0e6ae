"""SQL for the outbox: which rows still need a message, and marking them sent."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from relay_core.db.models import TRANSACTIONS, Transaction, utcnow
from relay_core.statuses import TxStatus
from relay_wire.direct import DirectPool


async def unsent(
    session: AsyncSession, older_than: datetime, limit: int
) -> list[tuple[str, str, str]]:
    """Pending rows never handed to SQS (id, type, lane), oldest first, locked against other
    sweepers."""
    stmt = (
        select(Transaction.id, Transaction.type, Transaction.lane)
        .where(
            Transaction.status == TxStatus.pending.value,
            Transaction.enqueued_at.is_(None),
            Transaction.created_at < older_than,
        )
        .order_by(Transaction.created_at)
        .limit(limit)
    )
    if session.get_bind().dialect.name != "sqlite":
        stmt = stmt.with_for_update(skip_locked=True)
    rows = await session.execute(stmt)
    return [(row.id, row.type, row.lane) for row in rows]


async def mark_enqueued(session: AsyncSession, ids: Collection[str]) -> None:
    if not ids:
        return
    # On the table, not the entity: no ORM evaluation of the WHERE against loaded objects.
    await session.execute(
        update(TRANSACTIONS)
        .where(TRANSACTIONS.c.id.in_(list(ids)), TRANSACTIONS.c.enqueued_at.is_(None))
        .values(enqueued_at=utcnow())
    )


async def mark_enqueued_direct(direct: DirectPool, ids: Collection[str]) -> None:
    """:func:`mark_enqueued`, committed by itself, in one round trip (relay_wire.direct)."""
    if not ids:
        return
    marks = ", ".join(["%s"] * len(ids))  # placeholders only: the ids go as parameters
    await direct.run(
        f"UPDATE transactions SET enqueued_at = %s WHERE id IN ({marks}) "  # noqa: S608
        "AND enqueued_at IS NULL",
        [utcnow(), *ids],
    )
