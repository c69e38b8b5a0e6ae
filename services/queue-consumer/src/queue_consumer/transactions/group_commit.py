"""Group commit: the status writes of concurrent messages share one database transaction.

Every message claims its row before the executor call and records the answer after it, each
a compare-and-set plus an event row. Committed one by one that is six round trips and two
Redis calls per message. Here each write waits in a queue; a writer takes everything queued
(up to ``max_batch``), runs the compare-and-sets in one transaction with the event rows as
one INSERT, commits once, answers each waiter, then writes Redis in one call before it takes
the next batch (the waiters go on meanwhile: their rows are committed). At
light load a batch holds one write and nothing waits; under load batches grow by themselves,
because whatever arrives while one batch commits goes into the next.

The contract for a caller is that of its own transaction: ``write`` returns True once the
change is committed, False if the row had moved on (nothing written), and raises if the
database failed (nothing written, or, if the caller was cancelled meanwhile, unknown: the
compare-and-set makes a retry safe either way).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import sqlalchemy.exc
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from relay_core.cache import CacheWrite, StatusCache
from relay_core.db.transitions import (
    Change,
    apply_written,
    write_changes,
    write_changes_direct,
)
from relay_core.statuses import is_terminal
from relay_core.tasks import cancel_all
from relay_core.views import status_entry
from relay_wire.direct import DirectPool

log = logging.getLogger(__name__)

_Pending = tuple[Change, "asyncio.Future[bool]"]


class GroupCommit:
    def __init__(
        self,
        engine: AsyncEngine,
        cache: StatusCache | None,
        *,
        direct: DirectPool | None = None,
        writers: int = 2,
        max_batch: int = 64,
        timeout_s: float = 15.0,
    ) -> None:
        self._engine = engine
        self.direct = direct  # (public: the claiming stage loads its batches' rows on it too)
        self._cache = cache
        self._writers = writers
        self._max_batch = max_batch
        # A batch that has not committed by then fails (its connection is dropped): a writer
        # must never wait for ever on a database that stopped answering, since every message
        # of the process would wait behind it.
        self._timeout_s = timeout_s
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self.batches = 0
        self.writes = 0

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._run(), name=f"group-commit-{i}") for i in range(self._writers)
        ]

    async def stop(self, timeout_s: float = 10.0) -> None:
        """Finish what is queued (after the drain, normally nothing), then stop the writers."""
        if self._tasks:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._queue.join(), timeout_s)
        await cancel_all(self._tasks)
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        while not self._queue.empty():  # nobody will write these: say so to their waiters
            _, future = self._queue.get_nowait()
            if not future.done():
                future.set_exception(RuntimeError("consumer stopping: write not made"))

    async def write(self, change: Change) -> bool:
        if not self._tasks:  # not started (tests, one-off tools): a transaction of its own
            (written,), cached = await self._commit([change])
            await self._write_through(cached)
            return written
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((change, future))
        return await future

    async def _run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < self._max_batch and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                await self._settle(batch)
            except asyncio.CancelledError:
                raise
            except Exception:  # never let a writer die: its waiters are answered in _settle
                log.exception("consumer.group_commit.error")
            finally:
                for _ in batch:
                    self._queue.task_done()

    async def _settle(self, batch: list[_Pending]) -> None:
        # A waiter that gave up before its batch started gives up its write.
        batch = [(change, future) for change, future in batch if not future.cancelled()]
        if not batch:
            return
        changes = [change for change, _ in batch]
        try:
            results, cached = await self._commit(changes)
        except asyncio.CancelledError:
            for _, future in batch:
                if not future.done():
                    future.cancel()
            raise
        except Exception as exc:
            if len(batch) > 1 and _worth_alone(exc):
                # One change may have doomed the others (a deadlock, a value the column
                # refuses): each gets a transaction of its own.
                log.warning("consumer.group_commit.split", extra={"error": str(exc)[:200]})
                for pending in batch:
                    await self._settle([pending])
                return
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, future), ok in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(ok)
        # The waiters go on as Redis is written: their rows are committed and their objects
        # up to date, and a reader meanwhile finds the previous version in Redis, as it would
        # a moment earlier (a newer one cannot be overwritten: the entries are versioned).
        await self._write_through(cached)

    async def _commit(self, changes: list[Change]) -> tuple[list[bool], list[CacheWrite]]:
        """Commit ``changes``; raises if that failed (then nothing was written). Returns
        whether each was written, and what to write through to Redis (:meth:`_write_through`,
        which cannot fail it either)."""
        if self.direct is not None:  # two round trips per batch (relay_wire.direct)
            async with asyncio.timeout(self._timeout_s), self.direct.connection() as raw:
                written = await write_changes_direct(self.direct, raw, changes)
        else:
            async with asyncio.timeout(self._timeout_s), self._engine.begin() as conn:
                written = await write_changes(conn, changes)
        self.batches += 1
        self.writes += len(changes)
        cached: list[CacheWrite] = []
        try:
            for change, columns in zip(changes, written, strict=True):
                if columns is None:
                    continue
                apply_written(change.tx, columns)
                tx = change.tx
                cached.append(
                    CacheWrite(tx.id, tx.version, status_entry(tx), is_terminal(tx.status))
                )
        except Exception:  # the rows are committed whatever happens here
            log.exception("consumer.group_commit.after_commit_failed")
        return [columns is not None for columns in written], cached

    async def _write_through(self, cached: list[CacheWrite]) -> None:
        if self._cache is None or not cached:
            return
        try:
            await self._cache.put_many_quietly(cached)
        except Exception:  # (put_many_quietly logs Redis's own errors)
            log.exception("consumer.group_commit.after_commit_failed")


def _worth_alone(exc: Exception) -> bool:
    """Whether retrying each change on its own could succeed where the batch failed: not when
    the database is unreachable, slow past the timeout, or out of pooled connections."""
    if isinstance(exc, TimeoutError | sqlalchemy.exc.TimeoutError):
        return False
    return not (isinstance(exc, DBAPIError) and exc.connection_invalidated)
