"""The sweeper: finds committed rows that never reached SQS and sends them."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from relay_api import metrics
from relay_api.outbox import repository
from relay_api.outbox.queue import WorkQueue
from relay_core.db.models import utcnow
from relay_core.queue import TransactionMessage

log = logging.getLogger(__name__)


# When the oldest message this process's publisher still has to send was handed to it (None
# when it holds nothing, or is not running and never will send).
Holding = Callable[[], datetime | None]


async def sweep_once(
    sessions: async_sessionmaker[AsyncSession],
    queue: WorkQueue,
    *,
    grace_s: float,
    batch: int,
    holding: Holding | None = None,
) -> int:
    """Send one batch of unsent rows. Returns how many were enqueued.

    A row is swept once its direct send had ``grace_s`` to land. Behind a backlog (the API
    overloaded) the publisher's sends land late, so the grace counts from the oldest message
    the publisher still holds: the sweeper does not send again what is about to be sent.
    """
    grace = timedelta(seconds=grace_s)
    cutoff = utcnow() - grace
    held_since = holding() if holding is not None else None
    if held_since is not None:
        cutoff = min(cutoff, held_since - grace)
    async with sessions() as session, session.begin():
        rows = await repository.unsent(session, cutoff, batch)
        if not rows:
            return 0
        messages = [
            TransactionMessage.new(tx_id, tx_type, lane=lane) for tx_id, tx_type, lane in rows
        ]
        sent = await queue.send(messages)
        await repository.mark_enqueued(session, sent)
    metrics.OUTBOX_SWEPT.inc(len(sent))
    log.info("api.outbox.swept", extra={"count": len(sent), "found": len(rows)})
    return len(sent)


async def sweep_until_idle(
    sessions: async_sessionmaker[AsyncSession],
    queue: WorkQueue,
    *,
    grace_s: float,
    batch: int,
    holding: Holding | None = None,
) -> int:
    total = 0
    while True:
        count = await sweep_once(sessions, queue, grace_s=grace_s, batch=batch, holding=holding)
        total += count
        if count < batch:
            return total


async def run_sweeper(
    sessions: async_sessionmaker[AsyncSession],
    queue: WorkQueue,
    *,
    interval_s: float,
    grace_s: float,
    batch: int,
    holding: Holding | None = None,
) -> None:
    """Background loop in the API process. Failures are logged; the loop keeps going."""
    while True:
        try:
            await sweep_until_idle(sessions, queue, grace_s=grace_s, batch=batch, holding=holding)
        except Exception as exc:
            log.warning("api.outbox.sweep_failed", extra={"error": f"{type(exc).__name__}: {exc}"})
        await asyncio.sleep(interval_s)
