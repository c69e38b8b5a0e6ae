"""Recording: every write a message makes to its row, and the executor's answer above all.

A write is a compare-and-set on the row's version, committed with other messages' writes in
one transaction (``transactions.group_commit``), then written through to Redis (MySQL first,
always). One executor transaction belongs to one row (a unique index): recording an answer
another row holds raises ``Conflict``, and the submitting stage decides afresh; a second
executor transaction for a row already recorded is a surplus, canceled at the executor.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from queue_consumer import metrics
from queue_consumer.circuit import CircuitOpen
from queue_consumer.pool import Pool
from queue_consumer.retry import Failure
from queue_consumer.stages.outcome import Outcome
from queue_consumer.tracking.follow import Follower
from queue_consumer.transactions import cancels, repository
from queue_consumer.transactions.group_commit import GroupCommit
from relay_core.db.models import Transaction, utcnow
from relay_core.db.transitions import Change
from relay_core.executor import ExecutorError, ExecutorTx
from relay_core.statuses import TxStatus, is_terminal

log = logging.getLogger(__name__)

SOURCE = "consumer"
SOURCE_DLQ = "consumer.dlq"  # the pipeline counts dead-lettered transactions by this source


class Conflict(Exception):
    """The executor id is recorded against another row (unique index)."""


class Recorder:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        writes: GroupCommit,
        pool: Pool,
        executor_timeout_s: float,
        follower: Follower | None = None,
    ) -> None:
        self.sessions = sessions
        self.writes = writes
        self.pool = pool
        self.executor_timeout_s = executor_timeout_s
        self.follower = follower

    async def write(
        self,
        tx: Transaction,
        status: TxStatus | str,
        *,
        reason: str | None = None,
        source: str = SOURCE,
        **values: Any,
    ) -> bool:
        """Compare-and-set, committed (with other messages' writes), then written through to
        Redis. On success ``tx`` holds the new state; False if the row changed meanwhile."""
        change = Change(tx, str(status), source=source, reason=reason, values=values)
        return await self.writes.write(change)

    async def finish(
        self, tx: Transaction, status: TxStatus, reason: str, *, source: str = SOURCE, **values: Any
    ) -> bool:
        return await self.write(tx, status, reason=reason, source=source, error=reason, **values)

    async def claim(
        self, tx: Transaction, owner: str, now: datetime, *, relayer: str | None = None
    ) -> bool:
        """Claim the row for ``owner``'s attempt, counting it. ``relayer``: the attempt is
        about to call that relayer, stamped with it (``submit_started_at``, which makes a
        later attempt in doubt until it has settled, and ``relayer``, where that attempt
        looks its answer up); without it, an in-doubt attempt claims to look its stamp up."""
        stamp = relayer is not None
        values: dict[str, Any] = {"submit_started_at": now, "relayer": relayer} if stamp else {}
        first = tx.first_attempt_at or (now if stamp else tx.submit_started_at)
        return await self.write(
            tx,
            TxStatus.processing,
            attempts=tx.attempts + 1,
            claimed_by=owner,
            claimed_at=now,
            first_attempt_at=first,
            **values,
        )

    async def record(self, tx: Transaction, result: ExecutorTx) -> bool:
        """Record ``result`` as this row's executor transaction, whatever else changed the row's
        version meanwhile (the reaper, the reconciler, another attempt). False if the row was
        finished or recorded by someone else (then a surplus is canceled). Raises Conflict if
        another row holds ``result``."""
        sent_to = tx.relayer  # this attempt's relayer, whatever the row says later
        for _ in range(5):
            now = utcnow()
            try:
                written = await self.write(
                    tx,
                    TxStatus.submitted,
                    executor_tx_id=result.id,
                    hash=result.hash,
                    submitted_at=now,
                    # The executor's answer is a report of where it is: the tracker waits its
                    # stale time from here, as after a webhook, instead of asking at once.
                    last_synced_at=now,
                    claimed_by=None,
                    result={"executor": {"id": result.id, "status": result.status}},
                )
            except IntegrityError as exc:
                raise Conflict(result.id) from exc
            if written:
                if self.follower is not None:
                    self.follower.follow(sent_to, tx.id, result)
                if tx.cancel_requested_at is not None:  # asked for while we were sending it
                    await cancels.carry_out(
                        tx, self.pool.member(sent_to), self.writes, self.executor_timeout_s
                    )
                return True
            async with self.sessions() as session:
                current = await repository.load(session, tx.id)
            if current is None:
                return False
            if current.executor_tx_id is not None:
                if current.executor_tx_id != result.id:
                    await self._cancel_surplus(tx.id, sent_to, current.executor_tx_id, result.id)
                return current.executor_tx_id == result.id
            if is_terminal(current.status):
                return False
            tx = current
        raise RuntimeError("could not record the executor's answer")

    async def _cancel_surplus(
        self, transaction_id: str, relayer: str | None, recorded: str, surplus: str
    ) -> None:
        """A second executor transaction for one of ours: the timing bounds were broken.
        Cancel the surplus one at the relayer this attempt sent it to (a pending transaction
        is canceled at once)."""
        member = self.pool.member(relayer)
        try:
            async with member.guard.slot() as permit:
                await permit.run(member.client.cancel(surplus), timeout_s=self.executor_timeout_s)
            outcome = "canceled"
        except (ExecutorError, CircuitOpen, TimeoutError) as exc:
            outcome = f"cancel failed, cancel it by hand: {exc}"
        log.error(
            "consumer.double_submission",
            extra={
                "transactionId": transaction_id,
                "recorded": recorded,
                "surplus": surplus,
                "outcome": outcome,
            },
        )

    async def lost_claim(self, transaction_id: str) -> Outcome:
        """Someone changed the row between our read and our write. Only a finished row lets
        this message go; otherwise it comes back shortly and is decided afresh (deleting it
        could leave the row with no message at all)."""
        metrics.CLAIM_CONFLICTS.inc("lost")
        async with self.sessions() as session:
            current = await repository.load(session, transaction_id)
        if (
            current is None
            or is_terminal(current.status)
            or current.status in (TxStatus.submitted, TxStatus.mined)
        ):
            return Outcome.done("lost_claim")
        return Outcome(
            Failure.deferred,
            "claim lost to a concurrent writer",
            retry_after_s=1,
            action="lost_claim_retry",
        )
