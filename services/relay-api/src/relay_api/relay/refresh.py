"""Status tier 3: refresh a stale, non-final status from the executor.

One request per transaction id is in flight at a time (callers for the same id share it), the
wait is short, and any executor trouble simply leaves the answer to MySQL.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from relay_core.cache import StatusCache
from relay_core.db.models import Transaction, utcnow
from relay_core.executor import ExecutorError, ExecutorTx
from relay_core.relayers import ExecutorPool
from relay_core.statuses import is_terminal
from relay_core.tracking import apply_upstream, interpret

log = logging.getLogger(__name__)


class Refresher:
    def __init__(
        self,
        executors: ExecutorPool,
        sessions: async_sessionmaker[AsyncSession],
        cache: StatusCache | None,
        *,
        refresh_after_s: float,
        timeout_s: float,
    ) -> None:
        self._executors = executors
        self._sessions = sessions
        self._cache = cache
        self._refresh_after = timedelta(seconds=refresh_after_s)
        self._timeout_s = timeout_s
        self._in_flight: dict[str, asyncio.Task[Transaction | None]] = {}

    def due(self, tx: Transaction) -> bool:
        if is_terminal(tx.status) or tx.executor_tx_id is None:
            return False
        return tx.last_synced_at is None or utcnow() - tx.last_synced_at >= self._refresh_after

    async def refresh(self, tx: Transaction) -> Transaction | None:
        """The refreshed row, or None when the executor could not tell us in time."""
        task = self._in_flight.get(tx.id)
        if task is None:
            task = asyncio.create_task(self._refresh(tx.id, tx.relayer, str(tx.executor_tx_id)))
            self._in_flight[tx.id] = task
            task.add_done_callback(lambda _: self._in_flight.pop(tx.id, None))
        try:
            return await asyncio.wait_for(asyncio.shield(task), self._timeout_s)
        except TimeoutError:
            return None

    async def _refresh(
        self, transaction_id: str, relayer: str | None, executor_tx_id: str
    ) -> Transaction | None:
        try:  # at the relayer it was sent to
            upstream = await self._executors.of(relayer).get(executor_tx_id)
        except ExecutorError as exc:
            log.info(
                "api.status.upstream_unavailable",
                extra={"transactionId": transaction_id, "error": str(exc)},
            )
            return None
        view = interpret(upstream.raw)
        if view is None:
            return None
        for _ in range(3):
            async with self._sessions() as session, session.begin():
                tx = await session.get(Transaction, transaction_id)
                if tx is None:
                    return None
                applied = await apply_upstream(session, tx, view, source="status")
            if applied:
                if self._cache is not None:
                    await self._cache.put_row_quietly(tx)
                return tx
        return None

    async def lookup(self, executor_tx_id: str) -> ExecutorTx | None:
        """Admin look-up of an id Relay does not know (it may be an executor id): each
        relayer of the pool is asked (the executor finds a transaction by its id alone, but
        one instance knows only its own)."""
        for relayer in self._executors:
            try:
                return await asyncio.wait_for(
                    self._executors.of(relayer).get(executor_tx_id), self._timeout_s
                )
            except (ExecutorError, TimeoutError):
                continue
        return None
