"""The lanes a consumer serves (the normal one, and the fast one when deployed): each lane's
queue, DLQ, batched deletes and switch state (:class:`Lane`), and the room for messages in
flight that their pollers share, with the fast lane's priority and the normal lane's
guaranteed share (:class:`Capacity`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from relay_core import controls
from relay_core.tasks import cancel_all

log = logging.getLogger(__name__)


@dataclass(eq=False)
class _Waiter:
    want: int
    urgent: bool
    granted: asyncio.Future[None]


class Capacity:
    """How many messages may be in flight. A poller receives a batch (at most its
    :meth:`batch`), then each of its messages asks for room (one slot) before it is worked
    on, and the poller receives again once they all have it: a slot that frees is used at
    once, while SQS is still asked for ten messages at a time (one ReceiveMessage per
    message would cost an SQS call, and its client CPU, per message instead of one per ten).
    With a small limit, a normal poller's share keeps one slow message from holding up
    every poller.

    Room is given in turn, with one exception: an *urgent* request (the fast lane's, made for
    messages it has already received) goes before the normal ones, but after ``fair_every``
    normal shares' worth of urgent messages in a row while a normal request waits (rounded up
    to a whole fast batch of at most 10), that one goes first: with the default share (64) the
    normal lane keeps about ``1 / (fair_every + 1)`` of the messages however busy the fast
    lane is.

    ``headroom`` room is kept for urgent requests: normal ones are given room only up to
    ``limit - headroom``, so a fast message finds a slot at once even while the normal lane
    keeps every other one busy.
    """

    def __init__(
        self, limit: int, pollers: int = 1, fair_every: int = 4, headroom: int = 0
    ) -> None:
        self.limit = limit
        self.headroom = min(headroom, limit // 2)
        self._share = max(1, (limit - self.headroom) // max(1, pollers))
        self.in_flight = 0
        self._waiting: deque[_Waiter] = deque()
        self._fair_every = fair_every
        self._urgent_run = 0  # urgent grants in a row while a normal request waited

    async def reserve(self, most: int, *, urgent: bool = False) -> int:
        want = min(most, self.limit if urgent else self._share)
        if not self._waiting and self._room(urgent) >= want:
            self.in_flight += want
            return want
        waiter = _Waiter(want, urgent, asyncio.get_running_loop().create_future())
        self._waiting.append(waiter)
        self._grant()
        try:
            await waiter.granted
        except asyncio.CancelledError:
            if waiter.granted.done() and not waiter.granted.cancelled():
                await self.release(want)  # granted as it was cancelled: give the room back
            else:
                self._waiting.remove(waiter)
                self._grant()
            raise
        return want

    def take_now(self, *, urgent: bool = False) -> bool:
        """Room for one message at once, if there is some and nobody waits for it (a poller
        starts the message already holding its slot, without a wait on the event loop)."""
        if self._waiting or self._room(urgent) < 1:
            return False
        self.in_flight += 1
        return True

    async def release(self, count: int = 1) -> None:
        self.in_flight -= count
        self._grant()

    def batch(self, urgent: bool) -> int:
        """The most messages a poller receives at once: a normal poller its share (with a
        small limit, one poller must not take every slot), the fast lane the whole limit."""
        return self.limit if urgent else self._share

    def _room(self, urgent: bool) -> int:
        return self.limit - self.in_flight - (0 if urgent else self.headroom)

    def _grant(self) -> None:
        while self._waiting:
            waiter = self._next()
            if self._room(waiter.urgent) < waiter.want:
                return
            normal_waits = any(not w.urgent for w in self._waiting if w is not waiter)
            self._waiting.remove(waiter)
            self.in_flight += waiter.want
            # counted in messages: the normal lane gets its share after at most
            # fair_every shares' worth of the fast lane's
            self._urgent_run = (
                self._urgent_run + waiter.want if waiter.urgent and normal_waits else 0
            )
            waiter.granted.set_result(None)

    def _next(self) -> _Waiter:
        urgent = next((w for w in self._waiting if w.urgent), None)
        normal = next((w for w in self._waiting if not w.urgent), None)
        fair = self._fair_every * self._share
        if urgent is not None and (normal is None or self._urgent_run < fair):
            return urgent
        assert normal is not None
        return normal


class Deleter:
    """Collects receipt handles and deletes them with DeleteMessageBatch (10 per call), up to
    ``in_flight`` calls at once. One call at a time, each after a 5 ms wait for company, could
    delete ~1,100 messages a second here: the consumer's ceiling, whatever else it did (and
    on SQS, where a call takes longer, less); messages not yet deleted stay in flight."""

    def __init__(self, sqs: Any, queue_url: str, in_flight: int = 4) -> None:
        self._sqs = sqs
        self._queue_url = queue_url
        self._pending: asyncio.Queue[str] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._calls = asyncio.Semaphore(in_flight)
        self._flushing: set[asyncio.Task[None]] = set()

    def add(self, receipt_handle: str) -> None:
        self._pending.put_nowait(receipt_handle)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="sqs-deleter")

    async def _run(self) -> None:
        while True:
            batch = [await self._pending.get()]
            if self._pending.qsize() < 9:
                await asyncio.sleep(0.005)  # let a few more finish so one call deletes them all
            while len(batch) < 10 and not self._pending.empty():
                batch.append(self._pending.get_nowait())
            await self._calls.acquire()
            task = asyncio.create_task(self._delete(batch))
            self._flushing.add(task)
            task.add_done_callback(self._flushing.discard)

    async def _delete(self, batch: list[str]) -> None:
        try:
            await self._flush(batch)
        finally:
            self._calls.release()
            for _ in batch:
                self._pending.task_done()

    async def _flush(self, batch: list[str]) -> None:
        entries = [{"Id": str(i), "ReceiptHandle": handle} for i, handle in enumerate(batch)]
        try:
            response = await self._sqs.delete_message_batch(
                QueueUrl=self._queue_url, Entries=entries
            )
            failed = response.get("Failed", [])
        except Exception as exc:
            failed = entries
            log.warning("consumer.delete_failed", extra={"count": len(batch), "error": str(exc)})
        if failed:
            # The message will come back; the row already says it is done, so it is dropped then.
            log.warning("consumer.delete_incomplete", extra={"count": len(failed)})

    async def stop(self, timeout_s: float = 10.0) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._pending.join(), timeout_s)
        if self._task is not None:
            await cancel_all([self._task])
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for task in list(self._flushing):  # past the timeout: the messages simply come back
            task.cancel()
        await asyncio.gather(*self._flushing, return_exceptions=True)


@dataclass(eq=False)
class Lane:
    """One lane of work as a consumer serves it: its queue and DLQ, its batched deletes, and
    the operator's switch for it (``relay_core.controls``)."""

    name: str
    queue_url: str
    dlq_url: str
    deleter: Deleter
    pollers: int
    receiving: asyncio.Event = field(default_factory=asyncio.Event)
    state: controls.LaneState = controls.LaneState.running
    parked: int = 0  # pollers waiting for the switch
    quiet: bool = False  # the last receive found the queue empty
    work: set[asyncio.Task[None]] = field(default_factory=set)
    received: int = 0

    @property
    def urgent(self) -> bool:
        """The fast lane's pollers receive first and are given room before the others."""
        return self.name == "fast"
