"""SQL for the tracker."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from relay_core.db.models import Transaction
from relay_core.statuses import TxStatus


async def due(session: AsyncSession, synced_before: datetime, limit: int) -> list[str]:
    """Submitted or mined transactions not heard of since ``synced_before``, stalest first."""
    rows = await session.execute(
        select(Transaction.id)
        .where(
            Transaction.status.in_([TxStatus.submitted.value, TxStatus.mined.value]),
            Transaction.executor_tx_id.is_not(None),
            or_(Transaction.last_synced_at.is_(None), Transaction.last_synced_at < synced_before),
        )
        .order_by(Transaction.last_synced_at)
        .limit(limit)
    )
    return [row[0] for row in rows]
