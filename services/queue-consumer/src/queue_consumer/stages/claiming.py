"""Claiming: whether this delivery may work on its row, and the claim that lets it.

1. A claim is a compare-and-set on the row's version, so two deliveries of the same message
   cannot both proceed. It is written by the submitting stage (``Recorder.claim``), in the
   same executor slot as the call it announces.
2. Claims are owned by a message (``owner``: its id, and the process that holds it). Two
   holders of the same message (its visibility lapsed while the first was still working) do
   not both proceed: an active claim by the same message makes the second wait; another copy
   of the message finds the claim and lets its own message go.
3. A claim is touched while its work outlives half the visibility timeout (the settling
   stage's heartbeat), released when an attempt gives up, and a claim nobody touched for
   ``consumer_stale_claim_s`` is returned to ``pending`` by the reaper, for the API's sweeper
   to enqueue again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from queue_consumer.retry import Failure
from queue_consumer.settings import ConsumerSettings
from queue_consumer.stages.outcome import Outcome
from queue_consumer.stages.recording import Recorder
from queue_consumer.transactions import repository
from relay_core.db.models import Transaction, utcnow
from relay_core.statuses import TxStatus, is_terminal

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Turn:
    """A row this delivery may work on now, and the owner its claim will carry."""

    tx: Transaction
    owner: str


class Claims:
    def __init__(
        self,
        settings: ConsumerSettings,
        sessions: async_sessionmaker[AsyncSession],
        recorder: Recorder,
    ) -> None:
        self.sessions = sessions
        self.recorder = recorder
        self.consumer_id = settings.consumer_id
        self._active = timedelta(seconds=settings.queue_visibility_timeout_s * 0.9)
        self._stale = timedelta(seconds=settings.consumer_stale_claim_s)

    def owner(self, message_id: str) -> str:
        """A redelivery of the same message may take its own claim over, a different copy of
        it may not."""
        return f"{message_id}@{self.consumer_id}"[:64]

    async def load_many(self, transaction_ids: list[str]) -> dict[str, Transaction]:
        """Snapshots of a receive batch's rows in one query (``admit`` takes them)."""
        if not transaction_ids:
            return {}
        direct = self.recorder.writes.direct
        if direct is not None:
            return await repository.load_many_direct(direct, transaction_ids)
        async with self.sessions() as session:
            return await repository.load_many(session, transaction_ids)

    async def admit(
        self, transaction_id: str, message_id: str, snapshot: Transaction | None
    ) -> Turn | Outcome:
        """The row, if this delivery may work on it; otherwise what became of the message.
        ``snapshot``: the row as read moments ago with its batch; every write is a
        compare-and-set on its version, so a row changed since is decided afresh."""
        tx = snapshot
        if tx is None:
            async with self.sessions() as session:
                tx = await repository.load(session, transaction_id)
        if tx is None:
            return Outcome(Failure.poison, "no transaction with this id", action="unknown")
        if is_terminal(tx.status) or tx.status in (TxStatus.submitted, TxStatus.mined):
            return Outcome.done("already_done")
        now = utcnow()
        if (
            tx.status == TxStatus.processing
            and tx.claimed_by is not None
            and tx.claimed_at is not None
            and now - tx.claimed_at < self._active
        ):
            if tx.claimed_by.split("@", 1)[0] == message_id:
                # This very message is still being worked on elsewhere (its visibility
                # lapsed): wait for that attempt rather than race it.
                remaining = (tx.claimed_at + self._active - now).total_seconds()
                return Outcome(
                    Failure.deferred,
                    "still being processed by another consumer",
                    retry_after_s=remaining,
                    action="busy_elsewhere",
                )
            # Another copy of the message is being worked on right now; it holds its own
            # message, which will be deleted or retried on its own.
            return Outcome.done("duplicate")
        return Turn(tx, self.owner(message_id))

    async def touch(self, transaction_id: str, message_id: str) -> None:
        async with self.sessions() as session, session.begin():
            await repository.touch_claim(session, transaction_id, self.owner(message_id), utcnow())

    async def release(self, transaction_id: str, message_id: str) -> None:
        async with self.sessions() as session, session.begin():
            await repository.release_claim(session, transaction_id, self.owner(message_id))

    async def reap_stale(self, limit: int = 100) -> int:
        """Return claims nobody has touched for ``consumer_stale_claim_s`` to ``pending`` with
        ``enqueued_at`` cleared, so the API's sweeper enqueues them again."""
        async with self.sessions() as session:
            stale = await repository.stale_claims(session, utcnow() - self._stale, limit)
        reaped = 0
        for tx in stale:
            if await self.recorder.write(
                tx,
                TxStatus.pending,
                reason="stale claim returned by the reaper",
                source="reaper",
                claimed_by=None,
                enqueued_at=None,
            ):
                reaped += 1
                log.warning("consumer.reaper.returned", extra={"transactionId": tx.id})
        return reaped
