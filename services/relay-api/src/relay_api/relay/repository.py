"""SQL for transactions on the API side."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, insert, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from relay_api.relay.schemas import MAX_BATCH
from relay_core.db.models import TRANSACTIONS, Transaction, new_id

if TYPE_CHECKING:
    from relay_api.deps import UnitOfWork

# Built once: a statement built per request (values bound into it) costs its construction and
# its cache key on every call; the parameters are passed beside it instead.
_INSERT = insert(TRANSACTIONS)
_PREPARED_ROWS = (1, MAX_BATCH)


_KEYS = [column.key for column in TRANSACTIONS.columns]
_DEFAULTS = [
    (column.key, column.default.arg)  # type: ignore[attr-defined]
    for column in TRANSACTIONS.columns
    if column.default is not None
]


def new_rows(common: dict[str, Any], each: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`new_row` for many rows that differ only in ``each``'s values (and their ids):
    the defaults worked out once."""
    template = new_row(**common)
    rows = []
    for values in each:
        row = template.copy()
        row["id"] = new_id()
        row.update(values)
        rows.append(row)
    return rows


def new_row(**values: Any) -> dict[str, Any]:
    """A new transaction row: every column, the model's defaults where ``values`` has none
    (a plain dict: an ORM object costs its instrumentation for nothing on the accept path)."""
    row = dict.fromkeys(_KEYS)
    row.update(values)
    for key, default in _DEFAULTS:
        if row[key] is None:
            row[key] = default(None) if callable(default) else default
    return row


async def add(uow: UnitOfWork, rows: list[dict[str, Any]]) -> bool:
    """One Core INSERT of ``rows`` (:func:`new_row`). Returns whether they are committed:
    on MySQL, with nothing else done in the unit of work, the INSERT commits by itself as one
    round trip on a driver connection, a prepared statement (relay_wire.direct), and no
    session is opened; otherwise the INSERT runs in the unit of work's session, for it to
    commit.

    The ORM unit of work (flush planning, identity map) costs more CPU than the statement for a
    single row on the accept path.
    """
    if uow.direct is not None and not uow.in_transaction:
        sql, args = uow.direct.row(TRANSACTIONS).insert(rows)
        # Prepared (binary values: half the CPU of escaping 100 rows into the text) for one
        # row and for a full batch; a batch of another size goes as text, so that each
        # connection keeps two of these statements prepared, not a hundred.
        await uow.direct.run(sql, args, prepare=len(rows) in _PREPARED_ROWS)
        return True
    await uow.session.execute(_INSERT, rows)
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


async def by_idempotency_keys(
    session: AsyncSession, client_id: str, keys: list[str | None]
) -> dict[str, Transaction]:
    found = await session.execute(
        select(Transaction).where(
            Transaction.client_id == client_id, Transaction.idempotency_key.in_(keys)
        )
    )
    return {tx.idempotency_key: tx for tx in found.scalars() if tx.idempotency_key}


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
