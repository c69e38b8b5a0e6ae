"""Executor webhooks applied in batches, on driver connections (relay_wire.direct).

A webhook, one at a time through a Session, cost the API about 5 ms of CPU here: its receipt
INSERT and flush, the row loaded by executor id, the compare-and-set, the event, the COMMIT,
each a round trip through SQLAlchemy, and the executor sends four per transaction
(docs/performance.md, issue 29). Here a verified webhook waits in a queue; a writer takes
everything queued (up to ``max_batch``) and, in three round trips however many there are:

1. reads, for each delivery, whether its webhook id has a receipt and its row (one SELECT
   over the deliveries as a derived table, joined to both);
2. runs the compare-and-sets each decides (relay_core.tracking.upstream_change, what
   :func:`relay_core.tracking.apply_upstream` writes) and
3. their events and client notifications, the new receipts, and the COMMIT (both
   :func:`relay_core.db.transitions.write_changes_direct`),

then answers each delivery and writes Redis in one call. What a delivery is answered is what
the one-at-a-time path answers: ``applied``; ``duplicate`` for a webhook id with a receipt;
404 when no row has its executor id yet (nothing kept, not even the receipt: the executor
retries); 400 when its row kept moving under it. A delivery whose row moved between the
read and its compare-and-set (the tracker, the status tier) goes again in the next batch,
as does a second delivery for a row that already has one in this batch (each is decided
from the row as the one before it left it).

A writer that takes a delivery waits ``linger_s`` (20 ms) for others before it reads, unless a
full batch is already queued, as the outbox publisher does before an SQS send: the executor
sends a transaction's four statuses seconds apart, so at chain rates (tens of transactions a
second) a writer that took whatever was queued wrote batches of one or two, each costing the
three round trips, the Redis call and the loop's wake-ups of a full one. Measured with
``bench.chain`` (docs/performance.md, issue 29): the API's CPU per confirmed transaction a
third lower. What it costs is 20 ms on each webhook's answer, which the executor waits for.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import zlib
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import Dialect

from relay_core.cache import CacheWrite, StatusCache
from relay_core.db.models import TRANSACTIONS, WebhookReceipt, utcnow
from relay_core.db.models import Transaction as Row
from relay_core.db.transitions import Change, apply_written, write_changes_direct
from relay_core.errors import BadRequest, NotFound
from relay_core.statuses import is_terminal
from relay_core.tasks import cancel_all
from relay_core.tracking import UpstreamView, upstream_change
from relay_core.views import status_entry
from relay_wire.direct import DirectPool

log = logging.getLogger(__name__)

TRIES = 3  # a row that moves under its delivery this often: 400, the executor retries


@dataclass(slots=True)
class Delivery:
    webhook_id: str
    executor_id: str
    view: UpstreamView
    future: asyncio.Future[str] = field(repr=False)
    tries: int = 0
    received: bool = False  # its receipt is committed (by an earlier try of this process)


class WebhookWriter:
    def __init__(
        self,
        direct: DirectPool,
        cache: StatusCache | None,
        *,
        writers: int = 2,
        max_batch: int = 64,
        timeout_s: float = 15.0,
        linger_s: float = 0.02,
    ) -> None:
        self._direct = direct
        self.linger_s = linger_s  # (tests set it)
        self._cache = cache
        self._max_batch = max_batch
        self._timeout_s = timeout_s  # a batch that has not committed by then fails
        # One queue per writer, a row's deliveries always in the same one: two writers never
        # race each other for a row (the loser's compare-and-set would find it moved).
        self._queues: list[asyncio.Queue[Delivery]] = [asyncio.Queue() for _ in range(writers)]
        self._tasks: list[asyncio.Task[None]] = []
        self.batches = 0
        self.deliveries = 0

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._run(queue), name=f"webhooks-{n}")
            for n, queue in enumerate(self._queues)
        ]

    async def stop(self, timeout_s: float = 10.0) -> None:
        if self._tasks:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    asyncio.gather(*(queue.join() for queue in self._queues)), timeout_s
                )
        await cancel_all(self._tasks)
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        for queue in self._queues:
            while not queue.empty():
                delivery = queue.get_nowait()
                if not delivery.future.done():
                    delivery.future.set_exception(RuntimeError("API stopping: webhook not applied"))

    async def apply(self, webhook_id: str, executor_id: str, view: UpstreamView) -> str:
        """``applied`` or ``duplicate`` once committed; raises NotFound (no row has this
        executor id yet), BadRequest (the row kept changing) or the database's error."""
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        delivery = Delivery(webhook_id, executor_id, view, future)
        if self._tasks:
            self._queue_of(delivery).put_nowait(delivery)
        else:  # not started (tests, one-off tools): batches of its own, now
            while not future.done():
                await self._settle([delivery])
        return await future

    def _queue_of(self, delivery: Delivery) -> asyncio.Queue[Delivery]:
        return self._queues[zlib.crc32(delivery.executor_id.encode()) % len(self._queues)]

    async def _run(self, queue: asyncio.Queue[Delivery]) -> None:
        while True:
            batch = [await queue.get()]
            if self.linger_s > 0 and queue.qsize() < self._max_batch - 1:
                await asyncio.sleep(self.linger_s)  # for company (module docstring)
            while len(batch) < self._max_batch and not queue.empty():
                batch.append(queue.get_nowait())
            try:
                await self._settle(batch)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # never let a writer die, nor a delivery wait for ever
                log.exception("api.webhooks.batch_error")
                for delivery in batch:
                    if not delivery.future.done():
                        delivery.future.set_exception(exc)
            finally:
                for _ in batch:
                    queue.task_done()

    async def _settle(self, batch: list[Delivery]) -> None:
        batch = [d for d in batch if not d.future.done()]  # a caller that gave up
        if not batch:
            return
        try:
            async with asyncio.timeout(self._timeout_s):
                later, moved, cached = await self._commit(batch)
        except asyncio.CancelledError:
            for delivery in batch:
                if not delivery.future.done():
                    delivery.future.cancel()
            raise
        except Exception as exc:
            for delivery in batch:
                if not delivery.future.done():
                    delivery.future.set_exception(exc)
            return
        for delivery in moved:
            delivery.tries += 1
            if delivery.tries >= TRIES:
                await self._forget_receipt(delivery)
                delivery.future.set_exception(BadRequest("the transaction kept changing; retry"))
        if self._tasks:
            for delivery in [*later, *moved]:
                if not delivery.future.done():
                    self._queue_of(delivery).put_nowait(delivery)
        if self._cache is not None and cached:
            try:
                await self._cache.put_many_quietly(cached)
            except Exception:  # the rows are committed whatever Redis says
                log.exception("api.webhooks.cache_failed")

    async def _commit(
        self, batch: list[Delivery]
    ) -> tuple[list[Delivery], list[Delivery], list[CacheWrite]]:
        """One batch's reads and writes; answers the deliveries it decides. Returns those
        for the next batch (a second one for a row), those whose row moved under them, and
        what to write through to Redis."""
        self.batches += 1
        self.deliveries += len(batch)
        rows = await self._direct.fetch(*_read(self._direct, batch))
        loader = self._direct.loader(Row)
        planned: list[tuple[Delivery, Change | None]] = []
        later: list[Delivery] = []
        fresh: list[Delivery] = []  # their receipts are written with this batch
        taken: set[str] = set()
        for delivery, (seen, *columns) in zip(batch, rows, strict=True):
            if seen and not delivery.received:
                delivery.future.set_result("duplicate")
                continue
            if columns[_ID] is None:
                # The consumer may not have recorded the executor's id yet: refuse (nothing
                # is kept, not even the receipt) so the executor retries.
                delivery.future.set_exception(
                    NotFound("no transaction with this executor id (yet)")
                )
                continue
            (tx,) = loader.objects([tuple(columns)])
            if tx.id in taken:  # decided from the row as this batch leaves it
                later.append(delivery)
                continue
            taken.add(tx.id)
            if not delivery.received:
                fresh.append(delivery)
            planned.append((delivery, upstream_change(tx, delivery.view, source="webhook")))
        changes = [change for _, change in planned if change is not None]
        receipts = _receipts(self._direct, fresh)
        if changes:
            async with self._direct.connection() as conn:
                written = await write_changes_direct(
                    self._direct, conn, changes, before_commit=receipts
                )
        else:
            written = []
            if receipts is not None:
                await self._direct.run(*receipts)
        for delivery in fresh:  # committed, whatever their compare-and-sets found
            delivery.received = True
        outcome = iter(written)
        moved: list[Delivery] = []
        cached: list[CacheWrite] = []
        for delivery, change in planned:
            if change is None:  # a final row: nothing to write
                delivery.future.set_result("applied")
                continue
            landed = next(outcome)
            if landed is None:  # the row moved on since it was read: again, from the new one
                moved.append(delivery)
                continue
            apply_written(change.tx, landed)
            tx = change.tx
            cached.append(CacheWrite(tx.id, tx.version, status_entry(tx), is_terminal(tx.status)))
            delivery.future.set_result("applied")
        return later, moved, cached

    async def _forget_receipt(self, delivery: Delivery) -> None:
        """A delivery given up on leaves no receipt: the executor's retry is applied."""
        if delivery.received:
            with contextlib.suppress(Exception):
                await self._direct.run(
                    "DELETE FROM webhook_receipts WHERE id = %s", [delivery.webhook_id]
                )


_ID = [column.name for column in TRANSACTIONS.columns].index("id")


def _read(direct: DirectPool, batch: list[Delivery]) -> tuple[str, list[Any]]:
    """Per delivery, in order: whether its webhook id has a receipt, then its row's columns
    (all None when no row has its executor id)."""
    columns = _columns(direct.dialect)
    first = "SELECT %s AS n, %s AS webhook_id, %s AS executor_id"
    values = " UNION ALL ".join([first, *["SELECT %s, %s, %s"] * (len(batch) - 1)])
    sql = (
        f"SELECT r.id IS NOT NULL, {columns} FROM ({values}) AS d "  # noqa: S608 (our metadata)
        "LEFT JOIN webhook_receipts AS r ON r.id = d.webhook_id "
        "LEFT JOIN transactions AS t ON t.executor_tx_id = d.executor_id ORDER BY d.n"
    )
    args: list[Any] = []
    for n, delivery in enumerate(batch):
        args.extend((n, delivery.webhook_id, delivery.executor_id))
    return sql, args


@functools.cache
def _columns(dialect: Dialect) -> str:
    """The row's columns as the read names them (in the Loader's order), built once."""
    quote = dialect.identifier_preparer.quote
    return ", ".join(f"t.{quote(column.name)}" for column in TRANSACTIONS.columns)


def _receipts(direct: DirectPool, fresh: list[Delivery]) -> tuple[str, list[Any]] | None:
    """The receipts of this batch's new deliveries, as INSERT IGNORE: another API process
    that applied the same webhook meanwhile (a retry sent elsewhere) is no error, and
    applying it twice is harmless (statuses only move forward)."""
    if not fresh:
        return None
    now = utcnow()
    return direct.row(WebhookReceipt.__table__).insert(  # type: ignore[arg-type]
        [{"id": d.webhook_id, "received_at": now} for d in fresh], ignore=True
    )
