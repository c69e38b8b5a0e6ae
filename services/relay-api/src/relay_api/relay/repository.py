"""SQL for transactions on the API side."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, insert, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from relay_api.relay.schemas import MAX_BATCH
from relay_core import ids
from relay_core.db.models import TRANSACTIONS, Transaction

if TYPE_CHECKING:
    from relay_api.deps import UnitOfWork

# Built once: a statement built per request (values bound into it) costs its construction and
# its cache key on every call; the parameters are passed beside it instead.
_INSERT = insert(TRANSACTIONS)
_PREPARED_ROWS = (1, MAX_BATCH)


_DEFAULTS = [
    (column.key, column.default.arg)  # type: ignore[attr-defined]
    for column in TRANSACTIONS.columns
    if column.default is not None
]
# The columns a transaction has when it is accepted: those with a default and those the accept
# paths fill. Only these are written (18 of the table's 38: the others are the consumer's,
# the tracker's and the webhooks' to fill, NULL until then), which halves the values a batch's
# INSERT carries.
NEW_COLUMNS = tuple(
    column.key
    for column in TRANSACTIONS.columns
    if column.default is not None
    or column.key
    in {
        "id",
        "client_id",
        "type",
        "request",
        "idempotency_key",
        "request_fingerprint",
        "inflight_key",
        "valid_until",
        "callback_url",
        "created_at",
        "updated_at",
        "spend_bucket",
        "reserved_fee_wei",
    }
)
_NEW = frozenset(NEW_COLUMNS)


def new_rows(common: dict[str, Any], each: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`new_row` for many rows that differ only in ``each``'s values (and their ids):
    the defaults worked out once."""
    template = new_row(**common)
    rows = []
    if each and not each[0].keys() <= _NEW:  # (the rows' keys are the same for every row)
        raise TypeError(f"not columns of a new transaction: {sorted(each[0].keys() - _NEW)}")
    for values, row_id in zip(each, ids.uuid4_many(len(each)), strict=True):
        row = template.copy()
        row["id"] = row_id
        row.update(values)
        rows.append(row)
    return rows


def new_row(**values: Any) -> dict[str, Any]:
    """A new transaction row: the columns of :data:`NEW_COLUMNS`, the model's defaults where
    ``values`` has none (a plain dict: an ORM object costs its instrumentation for nothing on
    the accept path)."""
    if not values.keys() <= _NEW:
        raise TypeError(f"not columns of a new transaction: {sorted(values.keys() - _NEW)}")
    row = dict.fromkeys(NEW_COLUMNS)
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
        sql, args = uow.direct.row(TRANSACTIONS, NEW_COLUMNS).insert(rows)
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
