"""Publish after commit, off the request path.

Requests hand their committed transaction ids to :class:`Publisher`; a background task collects
them for a few milliseconds (up to ``max_batch``), sends them to SQS in concurrent batches of
10 and marks all sent rows ``enqueued_at`` with one UPDATE. Under load the batches grow on their
own: whatever arrives while one batch is being sent goes out with the next. A send that fails (SQS
down, process killed before the send) leaves ``enqueued_at`` NULL and the sweeper sends the row
later, so nothing accepted is ever lost.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from relay_api import metrics
from relay_api.outbox import repository
from relay_api.outbox.queue import WorkQueue
from relay_core.db.models import utcnow
from relay_core.queue import TransactionMessage
from relay_core.tasks import cancel_all
from relay_wire.direct import DirectPool

log = logging.getLogger(__name__)


class Publisher:
    def __init__(
        self,
        queue: WorkQueue,
        sessions: async_sessionmaker[AsyncSession],
        direct: DirectPool | None = None,
        *,
        max_pending: int = 10_000,
        max_batch: int = 100,
        linger_s: float = 0.02,
    ) -> None:
        self._queue = queue
        self._sessions = sessions
        self._direct = direct
        self._max_batch = max_batch
        self._linger_s = linger_s
        self._max_pending = max_pending
        # The messages still to be taken for a send, oldest first, and when each message not
        # yet sent was handed over (those being sent included: they leave it once their send
        # is over). A request's messages go in with one extend each, not one by one: a batch
        # of 100 is one call here.
        self._unsent: collections.deque[TransactionMessage] = collections.deque()
        self._handed: collections.deque[datetime] = collections.deque()
        self._arrived = asyncio.Event()
        self._drained = asyncio.Event()
        self._drained.set()
        self._task: asyncio.Task[None] | None = None

    def publish(self, messages: list[TransactionMessage]) -> None:
        """Called after commit. Never blocks and never fails the request: past
        ``max_pending`` messages held, the rest are left to the sweeper (their rows are
        committed)."""
        room = self._max_pending - len(self._handed)
        if room < len(messages):
            metrics.OUTBOX_DEFERRED.inc(amount=len(messages) - max(room, 0))
            messages = messages[: max(room, 0)]
        if not messages:
            return
        self._unsent.extend(messages)
        self._handed.extend(itertools.repeat(utcnow(), len(messages)))
        self._drained.clear()
        self._arrived.set()

    def backlog(self) -> int:
        """How many committed messages wait here to be sent."""
        return len(self._handed)

    def oldest_age_s(self) -> float:
        """How long the oldest of them has waited (0 when none)."""
        return (utcnow() - self._handed[0]).total_seconds() if self._handed else 0.0

    def oldest_unsent(self) -> datetime | None:
        """When the oldest message still to be sent was handed over; None when there is none
        or the publisher is not running (then the sweeper must send what it holds)."""
        if self._task is None or not self._handed:
            return None
        return self._handed[0]

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="outbox-publisher")

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Send what is buffered (bounded by ``timeout_s``), then stop."""
        if self._task is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._drained.wait(), timeout_s)
        await cancel_all([self._task])
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None

    async def _run(self) -> None:
        while True:
            batch = await self._collect()
            try:
                await self.send_now(batch)
            finally:
                for _ in range(len(batch)):
                    self._handed.popleft()
                if not self._handed:
                    self._drained.set()

    async def _collect(self) -> list[TransactionMessage]:
        """The first messages, then whatever else arrived within ``linger_s`` (a batch of one
        costs an SQS call and an UPDATE + COMMIT, as much as a batch of a hundred)."""
        while not self._unsent:
            self._arrived.clear()
            await self._arrived.wait()
        if self._linger_s > 0:
            await asyncio.sleep(self._linger_s)
        unsent = self._unsent
        return [unsent.popleft() for _ in range(min(self._max_batch, len(unsent)))]

    async def send_now(self, batch: list[TransactionMessage]) -> None:
        try:
            sent = await self._queue.send(batch)
        except Exception as exc:
            metrics.OUTBOX_SEND_FAILURES.inc(len(batch))
            log.warning(
                "api.outbox.send_failed",
                extra={"count": len(batch), "error": f"{type(exc).__name__}: {exc}"},
            )
            return
        if len(sent) < len(batch):
            metrics.OUTBOX_SEND_FAILURES.inc(len(batch) - len(sent))
        try:
            if self._direct is not None:
                await repository.mark_enqueued_direct(self._direct, sent)
            else:
                async with self._sessions() as session, session.begin():
                    await repository.mark_enqueued(session, sent)
        except Exception as exc:
            # Sent but not marked: the sweeper sends it again and the consumer drops the copy.
            log.warning("api.outbox.mark_failed", extra={"count": len(sent), "error": str(exc)})
