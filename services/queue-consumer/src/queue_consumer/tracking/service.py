"""The tracker: polls the executor for transactions no webhook has updated lately, so every
transaction reaches its final status even when webhooks are off or lost — and well before
the executor's retention deletes its record.

A transaction the executor answers 404 for is marked ``upstream_missing_since``; if it stays
missing for ``reconcile_missing_after_s`` the reconciler gives it a final status. The tracker
takes executor slots like every call of the process, and asks each transaction's relayer
(the one it was sent to) while that relayer's circuit is closed. A client's cancel still
standing on a row the executor has not mined (``cancel_requested_at``: the executor did not
take it when it was asked for) is handed to the executor again (queue_consumer.transactions.
cancels)."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from queue_consumer.circuit import CircuitOpen
from queue_consumer.pool import Pool
from queue_consumer.tracking import repository
from queue_consumer.transactions import cancels
from queue_consumer.transactions import repository as rows
from queue_consumer.transactions.group_commit import GroupCommit
from relay_core.db.models import Transaction, utcnow
from relay_core.db.transitions import touch
from relay_core.executor import ErrorKind, ExecutorError
from relay_core.statuses import TxStatus
from relay_core.tracking import interpret, upstream_change
from relay_wire.direct import DirectPool

log = logging.getLogger(__name__)


class Tracker:
    """A pass reads its due rows whole in one query, asks the executor for them concurrently
    and writes what moved through the consumer's group commit (relay_core.tracking's
    compare-and-set, in batches with the message path's writes, Redis written through)."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        pool: Pool,
        writes: GroupCommit,
        *,
        direct: DirectPool | None = None,
        stale_after_s: float,
        batch: int,
        concurrency: int,
        timeout_s: float = 10.0,
    ) -> None:
        self._sessions = sessions
        self._pool = pool
        self._writes = writes
        self._direct = direct
        self._stale_after = timedelta(seconds=stale_after_s)
        self._batch = batch
        self._limit = asyncio.Semaphore(concurrency)
        self._timeout_s = timeout_s
        self.missing_upstream = 0

    async def run_once(self) -> int:
        """Refresh one batch of due transactions; returns how many were looked at."""
        if not any(breaker.closed for breaker in self._pool.breakers):
            return 0
        rows = await repository.due(
            self._sessions, self._direct, utcnow() - self._stale_after, self._batch
        )
        await asyncio.gather(*(self._refresh(tx) for tx in rows))
        return len(rows)

    async def _refresh(self, tx: Transaction) -> None:
        async with self._limit:
            assert tx.executor_tx_id is not None
            member = self._pool.member(tx.relayer)  # the relayer that has it
            try:
                async with member.guard.slot(counted=False):
                    upstream = await member.client.get(tx.executor_tx_id)
            except CircuitOpen:
                return
            except ExecutorError as exc:
                if exc.kind is ErrorKind.not_found:
                    await self._report_missing(tx)
                else:
                    log.info(
                        "consumer.tracker.upstream_error",
                        extra={"transactionId": tx.id, "error": str(exc)},
                    )
                return
            view = interpret(upstream.raw)
            if view is None:
                return
            if tx.cancel_requested_at is not None and view.status is TxStatus.submitted:
                # A client's cancel the consumer could not hand over when it recorded the id.
                await cancels.carry_out(tx, member, self._writes, self._timeout_s)
            for _ in range(3):
                change = upstream_change(tx, view, source="tracker")
                if change is None or await self._writes.write(change):
                    return
                async with self._sessions() as session:  # it moved meanwhile: decide again
                    reloaded = await rows.load(session, tx.id)
                if reloaded is None:
                    return
                tx = reloaded

    async def _report_missing(self, tx: Transaction) -> None:
        # Marked, not failed here: the reconciler gives up once it has been missing long
        # enough (an executor that lost its store for a moment may find it again).
        self.missing_upstream += 1
        now = utcnow()
        log.warning(
            "consumer.tracker.upstream_missing",
            extra={
                "transactionId": tx.id,
                "executorTxId": tx.executor_tx_id,
                "missingSince": str(tx.upstream_missing_since or now),
            },
        )
        async with self._sessions() as session, session.begin():
            current = await session.get(Transaction, tx.id)
            if current is not None:
                await touch(
                    session,
                    current,
                    last_synced_at=now,
                    upstream_missing_since=current.upstream_missing_since or now,
                )
