"""SQL for the tracker."""

from __future__ import annotations

import functools
from datetime import datetime

from sqlalchemy import or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from relay_core.db.models import Transaction
from relay_core.statuses import TxStatus
from relay_wire.direct import DirectPool

_FOLLOWED = (TxStatus.submitted.value, TxStatus.mined.value)


async def due(
    sessions: async_sessionmaker[AsyncSession],
    direct: DirectPool | None,
    synced_before: datetime,
    limit: int,
) -> list[Transaction]:
    """Submitted or mined transactions not heard of since ``synced_before``, stalest first,
    read whole in one query (on a driver connection where there is one: no ORM loading)."""
    if direct is not None:
        loader = direct.loader(Transaction)
        rows = await direct.fetch(_due_sql(loader.select), [*_FOLLOWED, synced_before, limit])
        return loader.objects(rows)
    async with sessions() as session:
        found = await session.scalars(
            select(Transaction)
            .where(
                Transaction.status.in_(_FOLLOWED),
                Transaction.executor_tx_id.is_not(None),
                or_(
                    Transaction.last_synced_at.is_(None),
                    Transaction.last_synced_at < synced_before,
                ),
            )
            .order_by(Transaction.last_synced_at)
            .limit(limit)
        )
        return list(found)


@functools.cache
def _due_sql(select_all: str) -> str:
    return (
        f"{select_all} WHERE status IN (%s, %s) AND executor_tx_id IS NOT NULL"
        " AND (last_synced_at IS NULL OR last_synced_at < %s)"
        " ORDER BY last_synced_at LIMIT %s"
    )


async def heard_of(
    sessions: async_sessionmaker[AsyncSession],
    direct: DirectPool | None,
    transaction_ids: list[str],
    at: datetime,
) -> None:
    """Mark the submitted or mined rows of ``transaction_ids`` heard of ``at`` (the follower
    found them unfinished): ``last_synced_at`` only, no version, no event (nothing a reader
    of the row's status sees changes)."""
    for start in range(0, len(transaction_ids), _HEARD_BATCH):
        ids = transaction_ids[start : start + _HEARD_BATCH]
        if direct is not None:
            marks = ", ".join(["%s"] * len(ids))
            await direct.run(
                f"UPDATE transactions SET last_synced_at = %s WHERE id IN ({marks})"  # noqa: S608 (placeholders)
                " AND status IN (%s, %s)",
                [at, *ids, *_FOLLOWED],
            )
            continue
        async with sessions() as session, session.begin():
            await session.execute(
                update(Transaction)
                .where(Transaction.id.in_(ids), Transaction.status.in_(_FOLLOWED))
                .values(last_synced_at=at)
            )


_HEARD_BATCH = 500
