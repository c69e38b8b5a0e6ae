"""The archive's database side: which rows are archivable, reading them whole, deleting them."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from relay_pipeline.database import Database, dbapi_connection, placeholder
from relay_pipeline.history.lifecycle import TERMINAL
from relay_pipeline.history.repository import read_jdbc
from relay_pipeline.history.window import Window, sql_timestamp

_S, _I, _L, _T = StringType(), IntegerType(), LongType(), TimestampType()
# Every column, as archived: the archive is the only copy once a row is deleted.
TRANSACTION_SCHEMA = StructType(
    [
        StructField(name, kind)
        for name, kind in (
            ("id", _S),
            ("client_id", _S),
            ("type", _S),
            ("status", _S),
            ("version", _I),
            ("request", _S),
            ("result", _S),
            ("error", _S),
            ("hash", _S),
            ("executor_tx_id", _S),
            ("attempts", _I),
            ("idempotency_key", _S),
            ("request_fingerprint", _S),
            ("inflight_key", _S),
            ("valid_until", _T),
            ("enqueued_at", _T),
            ("claimed_by", _S),
            ("claimed_at", _T),
            ("submit_started_at", _T),
            ("created_at", _T),
            ("updated_at", _T),
            ("submitted_at", _T),
            ("confirmed_at", _T),
        )
    ]
)
EVENT_SCHEMA = StructType(
    [
        StructField(name, kind)
        for name, kind in (
            ("id", _L),
            ("transaction_id", _S),
            ("from_status", _S),
            ("to_status", _S),
            ("source", _S),
            ("reason", _S),
            ("created_at", _T),
        )
    ]
)
# Columns added by later migrations that this module knows the type of.
_KNOWN_LATER = {
    "last_synced_at": _T,
    "callback_url": _S,
    # 0003 (outages)
    "first_attempt_at": _T,
    "upstream_missing_since": _T,
    "dead_letters": _I,
    # 0008 (fast lane)
    "lane": _S,
    # 0010 (fee budgets; wei amounts are decimal text, wider than a long)
    "spend_bucket": _T,
    "reserved_fee_wei": _S,
    "fee_settled_at": _T,
    "block_number": _L,
    "gas_used": _L,
    "effective_gas_price": _S,
    "fee_wei": _S,
    # 0011 (the relayer pool: the relayer a transaction was sent to)
    "relayer": _S,
    # 0012 (a client's cancel asked for while a consumer held it)
    "cancel_requested_at": _T,
}


@dataclass(frozen=True)
class TableSchemas:
    """The archived shape of both tables: every column the database has *now*.

    Built from the live table, so a column added by a later migration is archived too (as
    text if its type is not known here) rather than silently dropped before the delete.
    """

    transactions: StructType
    events: StructType


def table_schemas(db: Database) -> TableSchemas:
    return TableSchemas(
        transactions=_live_schema(db, "transactions", TRANSACTION_SCHEMA),
        events=_live_schema(db, "transaction_events", EVENT_SCHEMA),
    )


def _live_schema(db: Database, table: str, known: StructType) -> StructType:
    with dbapi_connection(db) as conn:
        cursor = conn.cursor()
        cursor.execute(f"SELECT * FROM {table} WHERE 1 = 0")
        names = [column[0] for column in cursor.description]
        conn.rollback()
    types = {f.name: f.dataType for f in known.fields}
    return StructType(
        [StructField(name, types.get(name, _KNOWN_LATER.get(name, _S))) for name in names]
    )


_TERMINAL_SQL = ", ".join(f"'{status}'" for status in sorted(TERMINAL))
LOCK_NAME = "relay_pipeline.archive"


@dataclass(frozen=True)
class Archivable:
    """What the database holds that is due for the archive."""

    transactions: int
    oldest_update: datetime | None


def archivable(db: Database, cutoff: datetime) -> Archivable:
    mark = placeholder(db)
    with dbapi_connection(db) as conn:
        cursor = conn.cursor()
        cursor.execute(
            "SELECT COUNT(*), MIN(updated_at) FROM transactions "
            f"WHERE status IN ({_TERMINAL_SQL}) AND updated_at < {mark}",
            (sql_timestamp(cutoff),),
        )
        count, oldest = cursor.fetchone()
        conn.rollback()
    if isinstance(oldest, str):  # SQLite keeps DATETIME as text
        oldest = datetime.fromisoformat(oldest)
    return Archivable(transactions=int(count or 0), oldest_update=oldest)


def read_due(
    spark: SparkSession,
    db: Database,
    schemas: TableSchemas,
    cutoff: datetime,
    oldest_update: datetime,
    partitions: int,
    fetch_size: int,
) -> tuple[DataFrame, DataFrame]:
    """Terminal transactions last updated before ``cutoff``, and all their events (with their
    transaction's ``tx_created_at``, which files them); read in ``updated_at`` slices through
    the ``(status, updated_at)`` index."""
    window = Window(oldest_update, cutoff)
    tx_columns = ", ".join(f.name for f in schemas.transactions.fields)
    tx_query = f"SELECT {tx_columns} FROM transactions WHERE status IN ({_TERMINAL_SQL})"
    transactions = read_jdbc(
        spark,
        db,
        tx_query,
        window.predicates("updated_at", partitions),
        schemas.transactions,
        fetch_size,
    )
    ev_columns = ", ".join(f"e.{f.name}" for f in schemas.events.fields)
    ev_query = (
        f"SELECT {ev_columns}, t.created_at AS tx_created_at, t.updated_at AS tx_updated_at "
        "FROM transaction_events e JOIN transactions t ON t.id = e.transaction_id "
        f"WHERE t.status IN ({_TERMINAL_SQL})"
    )
    events = read_jdbc(
        spark,
        db,
        ev_query,
        window.predicates("tx_updated_at", partitions),
        StructType([*schemas.events.fields, StructField("tx_created_at", _T)]),
        fetch_size,
    )
    return transactions, events


def delete_transactions(conn: Any, db: Database, ids: Sequence[str]) -> int:
    """Delete one batch of archived transactions with their events, in one DB transaction.

    Events go first and explicitly (the foreign key cascades too, but SQLite enforces it only
    when asked). Only terminal rows are deleted, whatever the caller passes.
    """
    if not ids:
        return 0
    mark = placeholder(db)
    marks = ", ".join(mark for _ in ids)
    cursor = conn.cursor()
    try:
        cursor.execute(f"DELETE FROM transaction_events WHERE transaction_id IN ({marks})", ids)
        cursor.execute(
            f"DELETE FROM transactions WHERE id IN ({marks}) AND status IN ({_TERMINAL_SQL})", ids
        )
        deleted = int(cursor.rowcount)
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return deleted


class ArchiveLocked(RuntimeError):
    """Another archive run holds the database's archive lock."""


@contextmanager
def archive_lock(db: Database) -> Iterator[Any]:
    """Yield a DB-API connection that holds the archive lock for the whole run.

    On MySQL a named lock (``GET_LOCK``), released when the connection ends — so also when the
    process is killed. Lock names are server-wide, so the name carries the database's: runs on
    two databases of one server do not exclude each other. SQLite is the single-user embedded
    mode and takes no lock.
    """
    name = lock_name(db)
    with dbapi_connection(db) as conn:
        if db.dialect == "mysql":
            cursor = conn.cursor()
            cursor.execute("SELECT GET_LOCK(%s, 0)", (name,))
            (got,) = cursor.fetchone()
            if got != 1:
                raise ArchiveLocked(f"another archive run holds the lock {name!r}")
        yield conn


def lock_name(db: Database) -> str:
    """``relay_pipeline.archive.<database>``; hashed when longer than MySQL's 64 characters."""
    name = f"{LOCK_NAME}.{db.name}"
    if len(name) > 64:
        name = f"{LOCK_NAME}.{hashlib.sha256(db.name.encode()).hexdigest()[:32]}"
    return name
