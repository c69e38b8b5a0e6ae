"""Fee reservations settled: once a transaction with a fee reserved (its client has a daily fee
budget, relay_core.spending) is mined, its receipt says what it cost (gas used x effective
price); the difference from what was reserved goes back to the budget (or, if it cost more,
is added), and the row keeps what it cost: block, gas used, price per gas, fee.

A transaction that ended without reaching the executor (refused, expired, canceled before it
was sent) cost nothing: its whole reservation goes back. One the chain has no receipt for yet
waits for the next pass; without a chain (``RELAY_CHAIN_RPC_URL`` unset) only those that cost
nothing can be settled, the others keep the most they could have cost until the reservation
leaves the 24 hours, when it is let go (its fee unknown). Settling writes the row (a
compare-and-set) and the client's budget in one transaction, so a fee is settled once
whoever else settles at the same time.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Any

from sqlalchemy import and_, or_, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from relay_core import evm, spending
from relay_core.db.models import Transaction, utcnow
from relay_core.db.transitions import touch
from relay_core.statuses import TxStatus

log = logging.getLogger(__name__)

# Where a reservation can be settled: mined (its receipt exists), or final.
_SETTLED_FROM = (
    TxStatus.mined.value,
    TxStatus.confirmed.value,
    TxStatus.failed.value,
    TxStatus.expired.value,
    TxStatus.canceled.value,
)


class FeeSettler:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        rpc: evm.EvmRpc | None,
        *,
        batch: int = 200,
        concurrency: int = 16,
    ) -> None:
        self._sessions = sessions
        self._rpc = rpc
        self._batch = batch
        self._limit = asyncio.Semaphore(concurrency)
        self.settled = 0  # (tests and the curious)
        self._after: tuple[datetime, str] | None = None  # where the next batch starts

    async def run_once(self) -> int:
        """Settle one batch; returns how many were settled. Batches walk the rows to settle in
        turn (oldest change first, from where the last batch stopped), so rows that cannot be
        settled yet (no receipt) never keep the others waiting."""
        query = select(Transaction).where(
            Transaction.status.in_(_SETTLED_FROM), Transaction.reserved_fee_wei.is_not(None)
        )
        if self._after is not None:
            at, tx_id = self._after
            query = query.where(
                or_(
                    Transaction.updated_at > at,
                    and_(Transaction.updated_at == at, Transaction.id > tx_id),
                )
            )
        async with self._sessions() as session:
            rows = list(
                (
                    await session.execute(
                        query.order_by(Transaction.updated_at, Transaction.id).limit(self._batch)
                    )
                ).scalars()
            )
            session.expunge_all()
        self._after = (rows[-1].updated_at, rows[-1].id) if len(rows) == self._batch else None
        done = await asyncio.gather(*(self._settle(tx) for tx in rows))
        settled = sum(done)
        self.settled += settled
        return settled

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
        log.info(
            "consumer.fee.settled",
            extra={"transactionId": tx.id, "reservedWei": str(reserved), "feeWei": str(fee)},
        )
        return True

    async def _cost(self, tx: Transaction) -> dict[str, Any] | None:
        """What ``tx`` cost, as row values; None: not known yet."""
        if tx.hash is None:
            if tx.executor_tx_id is None and tx.submit_started_at is None:
                return {"fee_wei": "0"}  # never sent: it cost nothing
            return None  # sent, and no hash yet (or ever: kept at the most it could cost)
        if self._rpc is None:
            return None
        try:
            receipt = await self._rpc.receipt(tx.hash)
        except (evm.RpcError, evm.RpcUnavailable):
            return None
        if receipt is None:
            return None
        gas_used = _quantity(receipt.get("gasUsed"))
        price = _quantity(receipt.get("effectiveGasPrice"))
        return {
            "block_number": _quantity(receipt.get("blockNumber")),
            "gas_used": gas_used,
            "effective_gas_price": str(price),
            "fee_wei": str(gas_used * price),
        }


def _quantity(value: Any) -> int:
    """A JSON-RPC quantity (0x hex) as an int; 0 when absent."""
    if value is None:
        return 0
    text = str(value)
    return int(text, 16) if text.startswith("0x") else int(text)
