"""SQL for transactions on the API side."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import and_, insert, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from relay_core.db.direct import DirectPool
from relay_core.db.models import TRANSACTIONS, Transaction

# Built once: a statement built per request (values bound into it) costs its construction and
# its cache key on every call; the parameters are passed beside it instead.
_INSERT = insert(TRANSACTIONS)


async def add(session: AsyncSession, tx: Transaction, direct: DirectPool | None = None) -> bool:
    """One Core INSERT of the row, with the model's defaults filled in on ``tx``. Returns
    whether it is already committed: with ``direct`` (MySQL) and nothing else done in
    ``session``, the INSERT and its COMMIT go out as one round trip on a driver connection
    (relay_core.db.direct); otherwise the INSERT runs in ``session`` for its unit of work
    to commit.

    The ORM unit of work (flush planning, identity map) costs more CPU than the statement for a
    single row on the accept path; ``tx`` stays a plain object outside the session.
    """
    values = {}
    for column in TRANSACTIONS.columns:
        value = getattr(tx, column.key)
        if value is None and column.default is not None:
            default = column.default.arg  # type: ignore[attr-defined]
            value = default(None) if callable(default) else default
            setattr(tx, column.key, value)
        values[column.key] = value
    if direct is not None and not session.in_transaction():
        sql, args = direct.row(TRANSACTIONS).insert([values])
        await direct.run(f"{sql}; COMMIT", args)
        return True
    await session.execute(_INSERT, values)
    return False


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


async def page(
    session: AsyncSession,
    client_id: str,
    status: str | None,
    after: tuple[datetime, str] | None,
    limit: int,
) -> list[Transaction]:
    """Newest first by (created_at, id); ``after`` is the last row of the previous page."""
    stmt = select(Transaction).where(Transaction.client_id == client_id)
    if status is not None:
        stmt = stmt.where(Transaction.status == status)
    if after is not None:
        created, tx_id = after
        stmt = stmt.where(
            or_(
                Transaction.created_at < created,
                and_(Transaction.created_at == created, Transaction.id < tx_id),
            )
        )
    stmt = stmt.order_by(Transaction.created_at.desc(), Transaction.id.desc()).limit(limit)
    return list((await session.execute(stmt)).scalars())
