"""The reconciliation's reads: a window's confirmed transactions with what their receipt gave
the row (block, gas used, price per gas, fee), a page at a time."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from relay_pipeline.database import Database, dbapi_connection, placeholder
from relay_pipeline.history.window import Window, sql_timestamp

CONFIRMED = "confirmed"
PAGE = 5_000


@dataclass(frozen=True)
class Recorded:
    """A confirmed transaction as the database holds it."""

    id: str
    hash: str | None
    block_number: int | None
    gas_used: int | None
    effective_gas_price: str | None
    fee_wei: str | None


def count_confirmed(db: Database, window: Window) -> int:
    mark = placeholder(db)
    with dbapi_connection(db) as conn:
        cursor = conn.cursor()
        cursor.execute(
            "SELECT COUNT(*) FROM transactions "
            f"WHERE created_at >= {mark} AND created_at < {mark} AND status = {mark}",
            (sql_timestamp(window.since), sql_timestamp(window.until), CONFIRMED),
        )
        return int(cursor.fetchone()[0])


def confirmed(db: Database, window: Window, page: int = PAGE) -> Iterator[Recorded]:
    """The window's confirmed transactions in (created_at, id) order, ``page`` rows per query.

    Each page continues after the last row of the one before (a key, not an offset): every
    query is a range of the ``created_at`` index, and no connection stays open between pages
    while the caller waits on the chain.
    """
    mark = placeholder(db)
    columns = "id, hash, block_number, gas_used, effective_gas_price, fee_wei, created_at"
    first = (
        f"SELECT {columns} FROM transactions "
        f"WHERE created_at >= {mark} AND created_at < {mark} AND status = {mark} "
        f"ORDER BY created_at, id LIMIT {int(page)}"
    )
    # The index on created_at ends with the primary key: the range starts at the last
    # created_at seen, and rows of that same instant continue after its id.
    following = (
        f"SELECT {columns} FROM transactions "
        f"WHERE created_at >= {mark} AND created_at < {mark} AND status = {mark} "
        f"AND (created_at > {mark} OR id > {mark}) "
        f"ORDER BY created_at, id LIMIT {int(page)}"
    )
    until = sql_timestamp(window.until)
    after: tuple[Any, str] | None = None
    while True:
        with dbapi_connection(db) as conn:
            cursor = conn.cursor()
            if after is None:
                cursor.execute(first, (sql_timestamp(window.since), until, CONFIRMED))
            else:
                at, last_id = after
                cursor.execute(following, (_bound(at), until, CONFIRMED, _bound(at), last_id))
            rows = cursor.fetchall()
        for row in rows:
            yield Recorded(
                id=str(row[0]),
                hash=row[1],
                block_number=None if row[2] is None else int(row[2]),
                gas_used=None if row[3] is None else int(row[3]),
                effective_gas_price=None if row[4] is None else str(row[4]),
                fee_wei=None if row[5] is None else str(row[5]),
            )
        if len(rows) < page:
            return
        after = (rows[-1][6], str(rows[-1][0]))


def _bound(created_at: Any) -> str:
    """A created_at read back, as the literal both databases compare correctly."""
    return created_at if isinstance(created_at, str) else sql_timestamp(created_at)
