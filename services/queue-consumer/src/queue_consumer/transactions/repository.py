"""SQL for the consumer's transactions."""

from __future__ import annotations

import functools
from collections.abc import Collection
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from relay_core.db.models import Transaction
from relay_core.statuses import TxStatus
from relay_wire.direct import DirectPool


async def load(session: AsyncSession, transaction_id: str) -> Transaction | None:
    tx = await session.get(Transaction, transaction_id)
    if tx is not None:
        session.expunge(tx)  # a snapshot: changes go through compare-and-set updates only
    return tx


async def load_many(session: AsyncSession, transaction_ids: list[str]) -> dict[str, Transaction]:
    rows = await session.execute(select(Transaction).where(Transaction.id.in_(transaction_ids)))
    found = {tx.id: tx for tx in rows.scalars()}
    session.expunge_all()
    return found


async def load_many_direct(
    direct: DirectPool, transaction_ids: list[str]
) -> dict[str, Transaction]:
    """:func:`load_many` in one round trip on a driver connection (relay_wire.direct): the
    SELECT is its own transaction, no ORM loading. A receive batch holds at most ten
    messages: the ids are padded to ten (the last one again), so that every batch is the one
    prepared statement."""
    loader = direct.loader(Transaction)
    found: dict[str, Transaction] = {}
    for start in range(0, len(transaction_ids), _BATCH):
        ids = transaction_ids[start : start + _BATCH]
        padded = [*ids, *[ids[-1]] * (_BATCH - len(ids))]
        rows = await direct.fetch(_select_batch(loader.select), padded, prepare=True)
        found.update((tx.id, tx) for tx in loader.objects(rows))
    return found


_BATCH = 10  # SQS's most messages per ReceiveMessage


@functools.cache
def _select_batch(select: str) -> str:
    marks = ", ".join(["%s"] * _BATCH)  # placeholders: the ids go as parameters
    return f"{select} WHERE id IN ({marks})"


async def executor_ids_taken(
    session: AsyncSession, executor_ids: Collection[str], except_id: str
) -> set[str]:
    """Which of these executor transactions are already recorded against another row."""
    if not executor_ids:
        return set()
    rows = await session.execute(
        select(Transaction.executor_tx_id).where(
            Transaction.executor_tx_id.in_(list(executor_ids)), Transaction.id != except_id
        )
    )
    return {str(row[0]) for row in rows}


async def touch_claim(
    session: AsyncSession, transaction_id: str, owner: str, now: datetime
) -> None:
    await session.execute(
        update(Transaction)
        .where(
            Transaction.id == transaction_id,
            Transaction.claimed_by == owner,
            Transaction.status == TxStatus.processing.value,
        )
        .values(claimed_at=now)
    )


async def release_claim(session: AsyncSession, transaction_id: str, owner: str) -> None:
    await session.execute(
        update(Transaction)
        .where(Transaction.id == transaction_id, Transaction.claimed_by == owner)
        .values(claimed_by=None)
    )


async def stale_claims(
    session: AsyncSession, older_than: datetime, limit: int
) -> list[Transaction]:
    rows = await session.execute(
        select(Transaction)
        .where(
            Transaction.status == TxStatus.processing.value,
            Transaction.claimed_at < older_than,
        )
        .order_by(Transaction.claimed_at)
        .limit(limit)
    )
    txs = list(rows.scalars())
    for tx in txs:
        session.expunge(tx)
    return txs
