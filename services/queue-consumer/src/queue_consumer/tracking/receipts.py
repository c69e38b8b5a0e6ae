"""What a transaction cost, from its receipt: once a transaction is mined, the row keeps its
block, gas used, price per gas and fee (gas used x effective price), and the status answer
and the client's callbacks carry them.

Every transaction that reached the chain (mined, confirmed, failed or canceled, with a hash)
gets them once the chain has its receipt; one it has no receipt for yet waits for the next
pass, for up to a day after its last change (:data:`RECEIPT_PATIENCE`). Without a chain
(``RELAY_CHAIN_RPC_URL`` unset) no receipt is read and the fields stay empty.

A transaction with a fee reserved (its client has a daily fee budget, relay_core.spending)
is also settled: the difference from what was reserved goes back to the budget (or, if it
cost more, is added). One that ended without reaching the executor (refused, expired,
canceled before it was sent) cost nothing: its whole reservation goes back. Without a chain
only those that cost nothing can be settled, the others keep the most they could have cost
until the reservation leaves the 24 hours, when it is let go (its fee unknown). Settling
writes the row (a compare-and-set) and the client's budget in one transaction, so a fee is
settled once whoever else settles at the same time.

A callback that reported a final status before the receipt was read could not say what the
transaction cost: the cost is then reported by a notification of its own
(``transaction.cost_recorded``), written with it.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, insert, or_, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from relay_core import evm, spending
from relay_core.cache import CacheWrite, StatusCache
from relay_core.db.models import NOTIFICATIONS, TRANSACTIONS, Transaction, utcnow
from relay_core.db.transitions import (
    Change,
    apply_written,
    touch,
    write_changes,
    write_changes_direct,
)
from relay_core.statuses import TxStatus, is_terminal
from relay_core.views import cost_entry, rfc3339, status_entry
from relay_wire.direct import DirectPool

log = logging.getLogger(__name__)

# Where a reservation can be settled: mined (its receipt exists), or final.
_SETTLED_FROM = (
    TxStatus.mined.value,
    TxStatus.confirmed.value,
    TxStatus.failed.value,
    TxStatus.expired.value,
    TxStatus.canceled.value,
)
# Where a transaction has reached the chain, if it has a hash: its receipt says what it cost.
_ON_CHAIN = (
    TxStatus.mined.value,
    TxStatus.confirmed.value,
    TxStatus.failed.value,
    TxStatus.canceled.value,
)
# How long after its last change a receipt is looked for. One the chain has not shown by then
# (a transaction its cancel's no-op replaced, a dev chain started afresh) is not asked for
# again, so such rows do not pile up in every pass.
RECEIPT_PATIENCE = timedelta(days=1)


class FeeSettler:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        rpc: evm.EvmRpc | None,
        cache: StatusCache | None = None,
        *,
        batch: int = 200,
        concurrency: int = 16,
        direct: DirectPool | None = None,
    ) -> None:
        """``direct``: the pass's reads and its writes of the costs go on driver connections
        (relay_wire.direct), not through the ORM: at a chain's rate the ORM's loading and one
        statement per row were a quarter of the consumer's CPU (docs/performance.md)."""
        self._sessions = sessions
        self._rpc = rpc
        self._cache = cache
        self._direct = direct
        self.batch = batch  # rows per walk and pass: a pass that did this many goes again
        self._limit = asyncio.Semaphore(concurrency)
        self.settled = 0  # (tests and the curious)
        self._reserved = _Walk(
            sessions,
            batch,
            None,  # rare (clients with a fee budget), and settled one session each
            Transaction.status.in_(_SETTLED_FROM),
            Transaction.reserved_fee_wei.is_not(None),
        )
        # Served by the index on (status, fee_wei, updated_at): the rows whose cost is still
        # to be read, among the many whose cost is known.
        self._unrecorded = _Walk(
            sessions,
            batch,
            direct,
            Transaction.status.in_(_ON_CHAIN),
            Transaction.fee_wei.is_(None),
            Transaction.hash.is_not(None),
            Transaction.reserved_fee_wei.is_(None),
        )

    async def run_once(self) -> int:
        """Settle one batch of reservations, then record what one batch of the other
        transactions on chain cost; returns how many rows were written."""
        rows = await self._reserved.next()
        settled = sum(await asyncio.gather(*(self._settle(tx) for tx in rows)))
        self.settled += settled
        if self._rpc is None:
            return settled
        rows = await self._unrecorded.next(Transaction.updated_at >= utcnow() - RECEIPT_PATIENCE)
        return settled + await self._record(rows)

    async def _settle(self, tx: Transaction) -> bool:
        async with self._limit:
            cost = await self._cost(tx)
        if cost is None:
            if tx.spend_bucket is None or tx.spend_bucket >= spending.bucket_of(
                utcnow() - spending.DAY
            ):
                return False
            # Its reservation has left the 24 hours: no budget counts it any more, and what it
            # cost is not known (no receipt): it is let go, its fee unknown.
            cost = {}
        reserved = int(tx.reserved_fee_wei or 0)
        fee = int(cost.get("fee_wei") or 0)
        async with self._sessions() as session, session.begin():
            current = await session.get(Transaction, tx.id)
            if current is None or current.reserved_fee_wei is None:
                return False  # settled meanwhile
            written = await touch(
                session,
                current,
                reserved_fee_wei=None,
                fee_settled_at=utcnow(),
                **cost,
            )
            if not written:
                return False
            bucket = current.spend_bucket
            in_window = bucket is not None and bucket >= spending.bucket_of(utcnow() - spending.DAY)
            if bucket is not None and in_window and "fee_wei" in cost and reserved != fee:
                await spending.give_back(
                    session,
                    current.client_id,
                    bucket,
                    reserved - fee,
                    utcnow(),
                    kind=spending.FEE,
                )
            if "gas_used" in cost and (found := _cost_notifications([current])):
                await session.execute(insert(NOTIFICATIONS), found)
        if self._cache is not None:  # a status read shows it at once
            await self._cache.put_row_quietly(current)
        log.info(
            "consumer.fee.settled",
            extra={"transactionId": tx.id, "reservedWei": str(reserved), "feeWei": str(fee)},
        )
        return True

    async def _record(self, rows: list[Transaction]) -> int:
        """Write what ``rows`` (no fee reserved) cost, those the chain has a receipt for: the
        receipts in one JSON-RPC batch, the rows in one unit of work, each a compare-and-set
        on the version it was read at (one that moved meanwhile is left to the next pass), and
        the cache in one call. One receipt call and one session a row cost the consumer 1.7-2.1
        ms per confirmed transaction (docs/performance.md)."""
        assert self._rpc is not None
        if not rows:
            return 0
        try:
            receipts = await self._rpc.receipts([tx.hash or "" for tx in rows])
        except evm.RpcUnavailable:
            return 0
        now = utcnow()
        changes = [
            Change(tx, tx.status, values={"fee_settled_at": now, **_cost_of(receipt)})
            for tx, receipt in zip(rows, receipts, strict=True)
            if receipt is not None
        ]
        if not changes:
            return 0
        recorded: list[Transaction] = []

        def landed(written: list[dict[str, Any] | None]) -> list[Transaction]:
            for change, columns in zip(changes, written, strict=True):
                if columns is not None:
                    apply_written(change.tx, columns)
                    recorded.append(change.tx)
            return recorded

        if self._direct is not None:
            direct = self._direct

            def notifications(written: list[dict[str, Any] | None]) -> Any:
                found = _cost_notifications(landed(written))
                return direct.row(NOTIFICATIONS, tuple(found[0])).insert(found) if found else None

            async with direct.connection() as conn:
                await write_changes_direct(direct, conn, changes, before_commit=notifications)
        else:
            async with self._sessions() as session, session.begin():
                found = _cost_notifications(landed(await write_changes(session, changes)))
                if found:
                    await session.execute(insert(NOTIFICATIONS), found)
        if self._cache is not None:  # a status read shows them at once
            await self._cache.put_many_quietly(
                [
                    CacheWrite(tx.id, tx.version, status_entry(tx), is_terminal(tx.status))
                    for tx in recorded
                ]
            )
        log.debug("consumer.fee.recorded", extra={"count": len(recorded)})
        return len(recorded)

    async def _cost(self, tx: Transaction) -> dict[str, Any] | None:
        """What ``tx`` (with a fee reserved) cost, as row values; None: not known yet."""
        if tx.hash is None:
            if tx.executor_tx_id is None and tx.submit_started_at is None:
                return {"fee_wei": "0"}  # never sent: it cost nothing
            return None  # sent, and no hash yet (or ever: kept at the most it could cost)
        return await self._receipt_cost(tx.hash)

    async def _receipt_cost(self, tx_hash: str) -> dict[str, Any] | None:
        """What the transaction ``tx_hash`` cost, as row values, from its receipt; None: the
        chain has none yet (or cannot be asked now)."""
        if self._rpc is None:
            return None
        try:
            receipt = await self._rpc.receipt(tx_hash)
        except (evm.RpcError, evm.RpcUnavailable):
            return None
        if receipt is None:
            return None
        return _cost_of(receipt)


class _Walk:
    """The rows matching ``where``, a batch at a time, oldest change first, each batch
    starting where the last one stopped, so rows that cannot be done yet (no receipt) never
    keep the others waiting; after the last batch it starts again from the oldest."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        batch: int,
        direct: DirectPool | None,
        *where: ColumnElement[bool],
    ) -> None:
        self._sessions = sessions
        self._direct = direct
        self._batch = batch
        self._where = where
        self._after: tuple[datetime, str] | None = None

    async def next(self, *also: ColumnElement[bool]) -> list[Transaction]:
        """The next batch (detached rows); ``also``: conditions of this batch only."""
        columns = TRANSACTIONS.columns if self._direct is not None else None
        query = (select(*columns) if columns is not None else select(Transaction)).where(
            *self._where, *also
        )
        if self._after is not None:
            at, tx_id = self._after
            query = query.where(
                or_(
                    Transaction.updated_at > at,
                    and_(Transaction.updated_at == at, Transaction.id > tx_id),
                )
            )
        query = query.order_by(Transaction.updated_at, Transaction.id).limit(self._batch)
        if self._direct is not None:
            rows = await _fetch_direct(self._direct, query)
        else:
            async with self._sessions() as session:
                rows = list((await session.execute(query)).scalars())
                session.expunge_all()
        self._after = (rows[-1].updated_at, rows[-1].id) if len(rows) == self._batch else None
        return rows


async def _fetch_direct(direct: DirectPool, query: Select[Any]) -> list[Transaction]:
    """``query`` (every column of ``transactions``, in the table's order) on a driver
    connection, as detached rows: compiled for the server (its IN lists written out), sent
    with its values in order."""
    compiled = query.compile(dialect=direct.dialect, compile_kwargs={"render_postcompile": True})
    names = compiled.positiontup or []
    rows = await direct.fetch(str(compiled), [compiled.params[name] for name in names])
    return list(direct.loader(Transaction).objects(rows))


def _cost_of(receipt: dict[str, Any]) -> dict[str, Any]:
    """A receipt's cost as row values."""
    gas_used = _quantity(receipt.get("gasUsed"))
    price = _quantity(receipt.get("effectiveGasPrice"))
    return {
        "block_number": _quantity(receipt.get("blockNumber")),
        "gas_used": gas_used,
        "effective_gas_price": str(price),
        "fee_wei": str(gas_used * price),
    }


def _cost_notifications(rows: list[Transaction]) -> list[dict[str, Any]]:
    """The clients' notifications of what ``rows`` cost, to be written in the unit of work that
    records it (so each is sent if and only if its cost committed), for those already final:
    the callback of a final status went without the cost. One still mined reports it with its
    next status."""
    notifications = []
    for tx in rows:
        if not tx.callback_url or not is_terminal(tx.status):
            continue
        at = tx.updated_at
        payload = {
            "event": "transaction.cost_recorded",
            "transactionId": tx.id,
            "status": tx.status,
            "hash": tx.hash,
            **cost_entry(tx),
            "timestamp": rfc3339(at),
        }
        notifications.append(
            {
                "transaction_id": tx.id,
                "client_id": tx.client_id,
                "url": tx.callback_url,
                "payload": payload,
                "state": "pending",
                "attempts": 0,
                "next_attempt_at": at,
                "created_at": at,
            }
        )
    return notifications


def _quantity(value: Any) -> int:
    """A JSON-RPC quantity (0x hex) as an int; 0 when absent."""
    if value is None:
        return 0
    text = str(value)
    return int(text, 16) if text.startswith("0x") else int(text)
