"""Status changes: a compare-and-set on the row plus one event row, in the caller's unit of
work. Every writer (API, consumer, reaper, webhooks, tracker) goes through here, so the
version always grows and the audit trail always matches the row.

:func:`write_changes` runs several changes in one unit of work (the consumer commits a batch
of them at once); :func:`transition` is the single change, applied to the row object at once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Update, bindparam, insert, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm.attributes import instance_state, set_committed_value

from relay_core.db.models import (
    NOTIFICATIONS,
    TRANSACTION_EVENTS,
    TRANSACTIONS,
    Transaction,
    utcnow,
)
from relay_core.views import cost_entry, rfc3339
from relay_wire import direct as direct_db
from relay_wire.direct import DirectPool


@dataclass(slots=True)
class Change:
    """Move ``tx`` (as last read) to ``status`` with ``values``, if nobody changed it since.

    The version and status the decision was made from are taken when the change is made, not
    when it runs: a change waiting for its batch must not take a newer state of the same row
    object (written by another change meanwhile) as the one it decided from. A change to the
    same status writes no event (a touch), unless it is a ``step``: a move that changes no
    status but that the client is told of, e.g. ``transaction.cancel_sent`` (an event from and
    into the status, and its notification under that name)."""

    tx: Transaction
    status: str
    source: str = ""
    reason: str | None = None
    values: dict[str, Any] = field(default_factory=dict)
    step: str | None = None
    expected_version: int = field(init=False)
    from_status: str = field(init=False)

    def __post_init__(self) -> None:
        self.expected_version = self.tx.version
        self.from_status = self.tx.status

    @property
    def records_event(self) -> bool:
        return self.status != self.from_status or self.step is not None

    def columns(self, now: datetime) -> dict[str, Any]:
        values = dict(self.values)
        updated_at = values.pop("updated_at", None) or now
        return {
            "status": self.status,
            "version": self.expected_version + 1,
            "updated_at": updated_at,
            **values,
        }


async def write_changes(
    db: AsyncSession | AsyncConnection, changes: Sequence[Change]
) -> list[dict[str, Any] | None]:
    """Run ``changes`` in the caller's unit of work: one compare-and-set UPDATE per row (in
    id order, so concurrent batches lock rows in the same order), then the event rows and
    client notifications of those that landed, one multi-row INSERT each.

    Returns, per change, the columns written, or None where the row had moved on. The row
    objects are not touched: :func:`apply_written` does that once the caller has committed.
    """
    now = utcnow()
    written: list[dict[str, Any] | None] = [None] * len(changes)
    for index in _lock_order(changes):
        change = changes[index]
        columns = change.columns(now)
        result = await db.execute(
            _compare_and_set(tuple(columns)),
            {**columns, "_id": change.tx.id, "_version": change.expected_version},
        )
        if result.rowcount == 1:  # type: ignore[attr-defined]
            written[index] = columns
    events, notifications = _records(changes, written)
    if events:
        await db.execute(insert(TRANSACTION_EVENTS), events)
    if notifications:
        await db.execute(insert(NOTIFICATIONS), notifications)
    return written


async def write_changes_direct(
    direct: DirectPool,
    conn: Any,
    changes: Sequence[Change],
    *,
    before_commit: tuple[str, Sequence[Any]]
    | Callable[[list[dict[str, Any] | None]], tuple[str, Sequence[Any]] | None]
    | None = None,
) -> list[dict[str, Any] | None]:
    """:func:`write_changes` on a driver connection (relay_wire.direct), and committed,
    in two round trips however many changes there are: the transaction's start and the
    compare-and-sets, then the event and notification INSERTs with the COMMIT
    (``before_commit``, a statement and its values, goes with them: the API's webhook
    receipts; or a function of what landed, per change as returned, that gives one or None:
    the receipt pass's notifications).

    The compare-and-sets of the changes that write the same columns go out as one UPDATE
    joined to their values (one answer for them all, not one each: 81 -> 62 µs of CPU per
    change in a batch of 14 here, and less work for the server). Its count says whether
    every one of them found
    its row at its expected version; when one did not, that UPDATE cannot say which, so the
    transaction is rolled back and the compare-and-sets go again one statement per row
    (a third round trip, only then)."""
    if not changes:
        return []
    now = utcnow()
    order = _lock_order(changes)
    planned: list[dict[str, Any]] = [{}] * len(changes)
    groups: dict[tuple[str, ...], list[int]] = {}
    for index in order:
        planned[index] = changes[index].columns(now)
        groups.setdefault(tuple(planned[index]), []).append(index)
    written: list[dict[str, Any] | None] = [None] * len(changes)
    if all(len(members) == 1 for members in groups.values()):
        counts = await _compare_and_set_each(direct, conn, changes, planned, order)
    else:
        statements = ["START TRANSACTION"]  # the connection autocommits otherwise
        args: list[Any] = []
        for columns, members in groups.items():
            sql, values = _compare_and_set_sql(direct, columns, len(members))
            statements.append(sql)
            for index in members:
                if len(members) > 1:
                    args.extend((changes[index].tx.id, changes[index].expected_version))
                args.extend(values(planned[index]))
                if len(members) == 1:
                    args.extend((changes[index].tx.id, changes[index].expected_version))
        _, *found = await direct_db.execute(conn, "; ".join(statements), args)
        if all(n == len(m) for n, m in zip(found, groups.values(), strict=True)):
            counts = [1] * len(order)
        else:
            await direct_db.execute(conn, "ROLLBACK")
            counts = await _compare_and_set_each(direct, conn, changes, planned, order)
    for index, count in zip(order, counts, strict=True):
        if count == 1:
            written[index] = planned[index]
    events, notifications = _records(changes, written)
    statements, args = [], []
    for table, rows in ((TRANSACTION_EVENTS, events), (NOTIFICATIONS, notifications)):
        if rows:
            insert_sql, insert_args = direct.row(table, tuple(rows[0])).insert(rows)
            statements.append(insert_sql)
            args.extend(insert_args)
    extra = before_commit(written) if callable(before_commit) else before_commit
    if extra is not None:
        statements.append(extra[0])
        args.extend(extra[1])
    await direct_db.execute(conn, "; ".join([*statements, "COMMIT"]), args)
    return written


async def _compare_and_set_each(
    direct: DirectPool,
    conn: Any,
    changes: Sequence[Change],
    planned: Sequence[dict[str, Any]],
    order: Sequence[int],
) -> list[int]:
    """One compare-and-set UPDATE per change, in ``order``, in a transaction started here:
    each one's count (1: written, 0: its row had moved on)."""
    statements = ["START TRANSACTION"]
    args: list[Any] = []
    for index in order:
        sql, values = _compare_and_set_sql(direct, tuple(planned[index]), 1)
        statements.append(sql)
        args.extend(values(planned[index]))
        args.extend((changes[index].tx.id, changes[index].expected_version))
    _, *counts = await direct_db.execute(conn, "; ".join(statements), args)
    return counts


def _lock_order(changes: Sequence[Change]) -> list[int]:
    """Rows are written in id order, so concurrent batches lock them in the same order."""
    return sorted(range(len(changes)), key=lambda i: changes[i].tx.id)


def _records(
    changes: Sequence[Change], written: Sequence[dict[str, Any] | None]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The event rows and client notifications of the changes that landed."""
    events: list[dict[str, Any]] = []
    notifications: list[dict[str, Any]] = []
    for change, columns in zip(changes, written, strict=True):
        if columns is None or not change.records_event:
            continue
        tx = change.tx
        at = columns["updated_at"]
        events.append(
            {
                "transaction_id": tx.id,
                "from_status": change.from_status,
                "to_status": change.status,
                "source": change.source,
                "reason": change.reason,
                "created_at": at,
            }
        )
        if tx.callback_url:
            # The client's notification is written with the change it reports (an outbox),
            # so it is sent if and only if the change committed.
            notifications.append(
                {
                    "transaction_id": tx.id,
                    "client_id": tx.client_id,
                    "url": tx.callback_url,
                    "payload": {
                        "event": change.step or "transaction.status_changed",
                        "transactionId": tx.id,
                        "status": change.status,
                        "hash": columns.get("hash", tx.hash),
                        **cost_entry(tx, columns),
                        "timestamp": rfc3339(at),
                    },
                    "state": "pending",
                    "attempts": 0,
                    "next_attempt_at": at,
                    "created_at": at,
                }
            )
    return events, notifications


@functools.cache
def _compare_and_set(columns: tuple[str, ...]) -> Update:
    """The UPDATE for one set of columns, built once: building and hashing a statement per
    row cost more CPU than executing it."""
    return (
        update(TRANSACTIONS)
        .where(
            TRANSACTIONS.c.id == bindparam("_id"),
            TRANSACTIONS.c.version == bindparam("_version"),
        )
        .values({name: bindparam(name, type_=TRANSACTIONS.c[name].type) for name in columns})
    )


def _compare_and_set_sql(
    direct: DirectPool, columns: tuple[str, ...], rows: int
) -> tuple[str, Callable[[dict[str, Any]], list[Any]]]:
    """:func:`_compare_and_set` as SQL text for the driver, and what makes a row's values.
    For one row: ``UPDATE ... SET <columns> WHERE id AND version`` (the values, then the id
    and expected version). For several: the same UPDATE joined to a table of their values,
    each row's id and expected version first, then its values; its count is the number of
    rows found at their expected versions."""
    row = direct.row(TRANSACTIONS, columns)
    found = _CAS_SQL.get((columns, rows))
    if found is None:
        quote = direct.dialect.identifier_preparer.quote
        # Column names from our own metadata, quoted; every value goes as a parameter.
        if rows == 1:
            sets = ", ".join(f"{quote(name)} = %s" for name in columns)
            found = f"UPDATE transactions SET {sets} WHERE id = %s AND version = %s"  # noqa: S608
        else:
            named = ", ".join(f"%s AS {quote(name)}" for name in columns)
            first = f"SELECT %s AS _cas_id, %s AS _cas_version, {named}"
            other = "SELECT " + ", ".join(["%s"] * (len(columns) + 2))
            values = " UNION ALL ".join([first, *[other] * (rows - 1)])
            sets = ", ".join(f"t.{quote(name)} = v.{quote(name)}" for name in columns)
            found = (
                f"UPDATE transactions AS t JOIN ({values}) AS v "  # noqa: S608
                f"ON t.id = v._cas_id AND t.version = v._cas_version SET {sets}"
            )
        _CAS_SQL[(columns, rows)] = found
    return found, row.values


_CAS_SQL: dict[tuple[tuple[str, ...], int], str] = {}


def apply_written(tx: Transaction, columns: dict[str, Any]) -> None:
    """Bring the row object up to what was written (without marking it dirty). An object with
    no history and nothing expired (the consumer's, read and written only through here) takes
    the values straight into its state: set_committed_value would only find nothing to
    clear, at ~1 µs a column."""
    state = instance_state(tx)
    if not state.committed_state and not state.expired_attributes and not state.modified:
        tx.__dict__.update(columns)
        return
    for key, value in columns.items():
        set_committed_value(tx, key, value)


async def transition(
    session: AsyncSession,
    tx: Transaction,
    new_status: str,
    *,
    source: str,
    reason: str | None = None,
    step: str | None = None,
    **values: Any,
) -> bool:
    """Move ``tx`` (as last read) to ``new_status`` if nobody changed it since.

    Returns False when the row moved on meanwhile (the caller reloads and decides again).
    On success ``tx`` is updated in place to the new state, including its version.
    """
    change = Change(tx, new_status, source=source, reason=reason, values=values, step=step)
    (columns,) = await write_changes(session, [change])
    if columns is None:
        return False
    apply_written(tx, columns)
    return True


async def touch(session: AsyncSession, tx: Transaction, **values: Any) -> bool:
    """Change fields without a status change (still a new version, no event)."""
    return await transition(session, tx, tx.status, source="", **values)
