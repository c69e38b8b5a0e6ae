"""The SQS side: pollers, a cap on work in flight, per-message timeouts, visibility
heartbeats, batched deletes, the housekeeping loops (reaper, reconciler, tracker, notifier, the
operator's switch), and a graceful drain on SIGTERM. The pollers ask the executor circuit
before they receive (``circuit.py``): while it is open, messages wait in SQS; and so they do
while an operator has paused the lane (``relay_core.controls``)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy.exc

from queue_consumer.circuit import CircuitBreaker
from queue_consumer.notifications.service import Notifier
from queue_consumer.retry import Action, Failure, Policy, plan_retry
from queue_consumer.settings import ConsumerSettings
from queue_consumer.tracking.service import Tracker
from queue_consumer.transactions.service import Outcome, TransactionProcessor
from relay_core import controls
from relay_core.db.models import Transaction, utcnow
from relay_core.queue import PoisonMessage, TransactionMessage
from relay_core.reconcile import Reconciler

log = logging.getLogger(__name__)


class Capacity:
    """How many messages may be in flight; pollers ask for room before receiving.

    A poller waits for room for a whole batch (``most``, or its share of the limit if that is
    smaller) rather than receiving as soon as one slot frees: one ReceiveMessage per message
    would cost an SQS call (and its client CPU) per message instead of one per ten. With a
    small limit the share keeps one slow message from holding up every poller.
    """

    def __init__(self, limit: int, pollers: int = 1) -> None:
        self.limit = limit
        self._share = max(1, limit // max(1, pollers))
        self.in_flight = 0
        self._changed = asyncio.Condition()

    async def reserve(self, most: int) -> int:
        want = min(most, self._share)
        async with self._changed:
            await self._changed.wait_for(lambda: self.limit - self.in_flight >= want)
            self.in_flight += want
            return want

    async def release(self, count: int = 1) -> None:
        async with self._changed:
            self.in_flight -= count
            self._changed.notify_all()


@dataclass
class Stats:
    counts: Counter[str] = field(default_factory=Counter)
    started: float = field(default_factory=time.monotonic)

    def summary(self) -> dict[str, Any]:
        return {"uptime_s": round(time.monotonic() - self.started, 1), **dict(self.counts)}


class Deleter:
    """Collects receipt handles and deletes them with DeleteMessageBatch (10 per call)."""

    def __init__(self, sqs: Any, queue_url: str) -> None:
        self._sqs = sqs
        self._queue_url = queue_url
        self._pending: asyncio.Queue[str] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    def add(self, receipt_handle: str) -> None:
        self._pending.put_nowait(receipt_handle)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="sqs-deleter")

    async def _run(self) -> None:
        while True:
            batch = [await self._pending.get()]
            await asyncio.sleep(0.005)  # let a few more finish so one call deletes them all
            while len(batch) < 10 and not self._pending.empty():
                batch.append(self._pending.get_nowait())
            try:
                await self._flush(batch)
            finally:
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
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


class Consumer:
    def __init__(
        self,
        settings: ConsumerSettings,
        sqs: Any,
        queue_url: str,
        dlq_url: str,
        processor: TransactionProcessor,
    ) -> None:
        self.settings = settings
        self.sqs = sqs
        self.queue_url = queue_url
        self.dlq_url = dlq_url
        self.processor = processor
        self.capacity = Capacity(settings.consumer_concurrency, settings.consumer_pollers)
        self.deleter = Deleter(sqs, queue_url)
        self.policy = Policy(
            max_receive_count=settings.queue_max_receive_count,
            base_s=settings.consumer_backoff_base_s,
            cap_s=settings.consumer_backoff_cap_s,
        )
        self.stats = Stats()
        self.stopping = asyncio.Event()
        self._work: set[asyncio.Task[None]] = set()
        self._visibility = settings.queue_visibility_timeout_s
        self._heartbeat_interval = max(self._visibility / 2, 1)
        self.last_poll = time.monotonic()
        self.breaker: CircuitBreaker = processor.guard.breaker
        self.tracker: Tracker | None = None
        self.notifier: Notifier | None = None
        self.reconciler: Reconciler | None = None
        # The operator's switch (relay_core.controls): set while this lane may be received.
        self.lane = controls.LANES[0]
        self.receiving = asyncio.Event()
        self.receiving.set()
        self.lane_state = controls.LaneState.running
        self._parked = 0  # pollers waiting for the switch
        self._quiet = False  # the last receive found the queue empty
        self._started_at = utcnow()

    # --- lifecycle --------------------------------------------------------------------------

    async def run(self) -> dict[str, Any]:
        """Consume until ``stopping`` is set, then drain. Returns the summary."""
        self.processor.writes.start()
        self.deleter.start()
        # A consumer started while its lane is paused (a deploy, autoscaling) must not
        # receive before it has read the switch.
        with contextlib.suppress(Exception):
            await self._follow_switch()
        pollers = [
            asyncio.create_task(self._poll(i), name=f"poller-{i}")
            for i in range(self.settings.consumer_pollers)
        ]
        housekeeping = [
            asyncio.create_task(self._reaper(), name="reaper"),
            asyncio.create_task(self._heartbeat_file(), name="heartbeat-file"),
            asyncio.create_task(self._watch_switch(), name="switch"),
        ]
        if self.tracker is not None:
            housekeeping.append(
                asyncio.create_task(
                    self._every(self.settings.tracker_interval_s, self.tracker.run_once, "tracker"),
                    name="tracker",
                )
            )
        if self.notifier is not None:
            housekeeping.append(
                asyncio.create_task(
                    self.notifier.run(self.settings.notify_interval_s), name="notifier"
                )
            )
        if self.reconciler is not None:
            housekeeping.append(
                asyncio.create_task(
                    self._every(
                        self.settings.consumer_reconcile_interval_s, self._reconcile, "reconcile"
                    ),
                    name="reconciler",
                )
            )
        await self.stopping.wait()
        log.info("consumer.stopping", extra={"in_flight": len(self._work)})
        for task in pollers + housekeeping:
            task.cancel()
        await asyncio.gather(*pollers, *housekeeping, return_exceptions=True)
        abandoned = await self._drain(self.settings.consumer_grace_s)
        await self.processor.writes.stop()
        await self.deleter.stop()
        with contextlib.suppress(Exception):
            await self._report("stopped")
        summary = self.stats.summary() | {
            "abandoned": abandoned,
            "circuitOpened": self.breaker.opened,
            "notified": self.notifier.delivered if self.notifier else 0,
        }
        log.info("consumer.stopped", extra=summary)
        return summary

    async def _drain(self, grace_s: float) -> int:
        if not self._work:
            return 0
        _, pending = await asyncio.wait(set(self._work), timeout=grace_s)
        for task in pending:  # their messages reappear after the visibility timeout
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        return len(pending)

    # --- polling ----------------------------------------------------------------------------

    async def _poll(self, index: int) -> None:
        while not self.stopping.is_set():
            if not self.receiving.is_set():  # paused by an operator: receive nothing
                self._parked += 1
                try:
                    await self.receiving.wait()
                finally:
                    self._parked -= 1
                continue
            # While the executor circuit is open nothing is received (messages keep their
            # receive counts); half-open, one message at a time carries the probe.
            want, ticket = await self.breaker.receivable(10)
            room = await self.capacity.reserve(want)
            if not self.receiving.is_set():  # paused while this poller waited for room
                await self.capacity.release(room)
                self.breaker.return_ticket(ticket)
                continue
            try:
                response = await self.sqs.receive_message(
                    QueueUrl=self.queue_url,
                    MaxNumberOfMessages=room,
                    WaitTimeSeconds=self.settings.consumer_wait_time_s,
                    AttributeNames=["ApproximateReceiveCount"],
                    MessageAttributeNames=["All"],
                )
            except asyncio.CancelledError:
                await self.capacity.release(room)
                self.breaker.return_ticket(ticket)
                raise
            except Exception as exc:
                await self.capacity.release(room)
                self.breaker.return_ticket(ticket)
                log.warning("consumer.receive_failed", extra={"poller": index, "error": str(exc)})
                await asyncio.sleep(1.0)
                continue
            self.last_poll = time.monotonic()
            messages = response.get("Messages", [])
            self._quiet = not messages
            if len(messages) < room:
                await self.capacity.release(room - len(messages))
            if not messages:
                self.breaker.return_ticket(ticket)
                continue
            parsed = [_parse(message) for message in messages]
            try:
                # One SELECT for the batch; each message still decides and claims on its own.
                snapshots = await self.processor.load_many(
                    [p.transaction_id for p in parsed if isinstance(p, TransactionMessage)]
                )
            except asyncio.CancelledError:
                await self.capacity.release(len(messages))
                raise
            except Exception as exc:  # each message loads its row itself and fails on its own
                log.warning("consumer.batch_load_failed", extra={"error": str(exc)})
                snapshots = {}
            for message, body in zip(messages, parsed, strict=True):
                # Each row object goes to one message: two copies of a message in one batch
                # must not share (and update) the same snapshot; the second loads its own.
                snapshot = (
                    snapshots.pop(body.transaction_id, None)
                    if isinstance(body, TransactionMessage)
                    else None
                )
                task = asyncio.create_task(self._handle(message, body, snapshot))
                self._work.add(task)
                task.add_done_callback(self._work.discard)
                if ticket is not None:  # one message: it carried the half-open probe
                    task.add_done_callback(functools.partial(self._return_ticket, ticket))

    def _return_ticket(self, ticket: int, _: asyncio.Task[None]) -> None:
        self.breaker.return_ticket(ticket)

    # --- one message ------------------------------------------------------------------------

    async def _handle(
        self,
        message: dict[str, Any],
        body: TransactionMessage | PoisonMessage,
        snapshot: Transaction | None,
    ) -> None:
        started = time.monotonic()
        receive_count = int(message.get("Attributes", {}).get("ApproximateReceiveCount", "1"))
        context: dict[str, Any] = {"messageId": message.get("MessageId")}
        heartbeat: list[asyncio.Task[None]] = []
        done = asyncio.Event()
        timer: asyncio.TimerHandle | None = None
        outcome: Outcome
        try:
            self.stats.counts["received"] += 1
            if isinstance(body, PoisonMessage):
                outcome = Outcome(Failure.poison, str(body), action="poison")
            else:
                context["transactionId"] = body.transaction_id
                tx_message: TransactionMessage = body
                # Most messages finish long before half the visibility timeout; only those
                # that do not get a heartbeat task.
                timer = asyncio.get_running_loop().call_later(
                    self._heartbeat_interval,
                    lambda: heartbeat.append(
                        asyncio.create_task(self._keep_invisible(message, tx_message, done))
                    ),
                )
                outcome = await self._attempt(body, str(message.get("MessageId")), snapshot)
            await self._apply(message, outcome, receive_count, context, started)
        except asyncio.CancelledError:
            # Shutdown past the grace period: leave the message to reappear.
            self.stats.counts["abandoned"] += 1
            raise
        except Exception:
            self.stats.counts["errors"] += 1
            log.exception("consumer.message.error", extra=context)
        finally:
            done.set()
            if timer is not None:
                timer.cancel()
            for task in heartbeat:
                # Let a visibility change or claim touch in progress finish rather than cut a
                # database call in half.
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(task, 10)
            await self.capacity.release()

    async def _attempt(
        self, parsed: TransactionMessage, message_id: str, snapshot: Transaction | None
    ) -> Outcome:
        try:
            async with asyncio.timeout(self.settings.consumer_message_timeout_s):
                return await self.processor.process(
                    parsed.transaction_id, message_id, snapshot=snapshot
                )
        except Exception as exc:  # timed out, database unavailable and the like
            # Best effort: let the next delivery proceed at once rather than wait for the
            # claim to go stale (it would take over a stale claim anyway).
            with contextlib.suppress(Exception):
                await self.processor.release_claim(parsed.transaction_id, message_id)
            if isinstance(exc, TimeoutError):
                return Outcome(Failure.transient, "message timed out", action="timeout")
            reason = f"{type(exc).__name__}: {str(exc)[:200]}"
            if isinstance(exc, sqlalchemy.exc.SQLAlchemyError | OSError):
                return Outcome(Failure.transient, reason, action="database_error")
            log.exception(
                "consumer.message.unexpected", extra={"transactionId": parsed.transaction_id}
            )
            return Outcome(Failure.error, reason, action="error")

    async def _apply(
        self,
        message: dict[str, Any],
        outcome: Outcome,
        receive_count: int,
        context: dict[str, Any],
        started: float,
    ) -> None:
        plan = plan_retry(
            outcome.failure, receive_count, self.policy, retry_after_s=outcome.retry_after_s
        )
        handle = message["ReceiptHandle"]
        if plan.action is Action.delete:
            self.deleter.add(handle)
        elif plan.action is Action.backoff:
            await self._set_visibility(handle, plan.delay_s)
        elif plan.action is Action.dead_letter:
            await self._dead_letter(message, outcome, receive_count)
        else:
            await self._requeue(message, plan.delay_s)
        self.stats.counts[plan.action.value] += 1
        self.stats.counts[outcome.action] += 1
        level = logging.INFO if outcome.failure is None else logging.WARNING
        log.log(
            level,
            "consumer.message.handled",
            extra={
                **context,
                "action": outcome.action,
                "plan": plan.action.value,
                "delay_s": plan.delay_s or None,
                "receiveCount": receive_count,
                "duration_ms": round((time.monotonic() - started) * 1000, 1),
                "error": outcome.reason or None,
            },
        )

    async def _set_visibility(self, handle: str, seconds: int) -> None:
        try:
            await self.sqs.change_message_visibility(
                QueueUrl=self.queue_url, ReceiptHandle=handle, VisibilityTimeout=seconds
            )
        except Exception as exc:
            log.warning("consumer.visibility_failed", extra={"error": str(exc)})

    async def _dead_letter(self, message: dict[str, Any], outcome: Outcome, count: int) -> None:
        attributes = dict(message.get("MessageAttributes") or {})
        attributes.update(
            {
                "deadLetterReason": {
                    "DataType": "String",
                    "StringValue": outcome.reason[:1000] or "-",
                },
                "deadLetterKind": {
                    "DataType": "String",
                    "StringValue": str(outcome.failure.value if outcome.failure else "unknown"),
                },
                "receiveCount": {"DataType": "Number", "StringValue": str(count)},
                "sourceMessageId": {
                    "DataType": "String",
                    "StringValue": str(message.get("MessageId")),
                },
            }
        )
        await self.sqs.send_message(
            QueueUrl=self.dlq_url,
            MessageBody=message.get("Body") or "<empty>",
            MessageAttributes=attributes,
        )
        self.deleter.add(message["ReceiptHandle"])

    async def _requeue(self, message: dict[str, Any], delay_s: int) -> None:
        """The last allowed receive of a message that still has work: a fresh copy carries
        it on (delayed like a back-off), so SQS's redrive never takes a live transaction."""
        try:
            await self.sqs.send_message(
                QueueUrl=self.queue_url,
                MessageBody=message.get("Body") or "",
                MessageAttributes=dict(message.get("MessageAttributes") or {}),
                DelaySeconds=delay_s,
            )
        except Exception as exc:
            # Then the redrive takes it; the reconciler finds its row (docs/runbook.md).
            log.error("consumer.requeue_failed", extra={"error": str(exc)})
            await self._set_visibility(message["ReceiptHandle"], delay_s)
            return
        self.deleter.add(message["ReceiptHandle"])

    async def _keep_invisible(
        self, message: dict[str, Any], parsed: TransactionMessage, done: asyncio.Event
    ) -> None:
        """Work that outlives half the visibility timeout extends it (and the claim), then again
        every half timeout until it ends. Started by a timer after the first half."""
        while not done.is_set():
            await self._set_visibility(message["ReceiptHandle"], self._visibility)
            with contextlib.suppress(Exception):
                await self.processor.touch_claim(
                    parsed.transaction_id, str(message.get("MessageId"))
                )
            self.stats.counts["heartbeats"] += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), self._heartbeat_interval)

    # --- housekeeping -----------------------------------------------------------------------

    async def _reaper(self) -> None:
        while True:
            await asyncio.sleep(self.settings.consumer_reaper_interval_s)
            try:
                reaped = await self.processor.reap_stale_claims()
                self.stats.counts["reaped"] += reaped
            except Exception as exc:
                log.warning("consumer.reaper.failed", extra={"error": str(exc)})

    async def _reconcile(self) -> int:
        """One reconciler pass, unless the executor circuit is open or the lane is paused:
        then messages wait in SQS on purpose and their rows only look stranded."""
        if self.reconciler is None or not self.breaker.closed or not self.receiving.is_set():
            return 0
        report = await self.reconciler.run_once()
        self.stats.counts["requeued_by_reconciler"] += report.requeued
        self.stats.counts["dead_lettered_by_reconciler"] += report.dead_lettered
        self.stats.counts["lost_upstream"] += report.lost_upstream
        return 0  # then wait the interval: a pass settles its whole batch

    async def _every(self, interval_s: float, job: Callable[[], Awaitable[int]], name: str) -> None:
        while True:
            try:
                done = await job()
                self.stats.counts[f"{name}_done"] += done
            except Exception as exc:
                log.warning(f"consumer.{name}.failed", extra={"error": str(exc)})
                done = 0
            if not done:
                await asyncio.sleep(interval_s)

    async def _watch_switch(self) -> None:
        """Every few seconds: read the lane's switch, obey it, and report (``run`` read it
        once before the pollers started)."""
        while True:
            await asyncio.sleep(self.settings.consumer_control_interval_s)
            try:
                await self._follow_switch()
            except Exception as exc:  # the database is down: keep doing what we were doing
                log.warning("consumer.switch.failed", extra={"error": str(exc)[:200]})

    async def _follow_switch(self) -> None:
        async with self.processor.sessions() as session:
            state = await controls.lane_state(session, self.lane)
        if state is not self.lane_state:
            log.info("consumer.switch", extra={"lane": self.lane, "state": state.value})
            self.lane_state = state
        if state is controls.LaneState.paused:
            self.receiving.clear()
        else:
            self.receiving.set()
        if state is controls.LaneState.draining and await self._drained():
            async with self.processor.sessions() as session, session.begin():
                if await controls.finish_drain(session, self.lane, self.settings.consumer_id):
                    log.info("consumer.drained", extra={"lane": self.lane})
        await self._report(self._state())

    def _state(self) -> str:
        if self.receiving.is_set():
            return "running"
        busy = self._work or self._parked < self.settings.consumer_pollers
        return "pausing" if busy else "paused"

    async def _drained(self) -> bool:
        """Nothing held here, the last receive came back empty, and SQS agrees: nothing
        visible, in flight elsewhere or delayed."""
        if self._work or not self._quiet:
            return False
        response = await self.sqs.get_queue_attributes(
            QueueUrl=self.queue_url,
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            ],
        )
        return not any(int(v) for v in response.get("Attributes", {}).values())

    async def _report(self, state: str) -> None:
        mine = controls.Report(
            consumer_id=self.settings.consumer_id,
            lane=self.lane,
            state=state,
            in_flight=len(self._work),
            received=self.stats.counts["received"],
            circuit=self.breaker.state.value,
            started_at=self._started_at,
        )
        async with self.processor.sessions() as session, session.begin():
            await controls.report(session, mine)

    async def _heartbeat_file(self) -> None:
        path = Path(self.settings.consumer_heartbeat_file)
        while True:
            with contextlib.suppress(OSError):
                await asyncio.to_thread(path.write_text, f"{time.time():.0f}\n")
            await asyncio.sleep(5)


def _parse(message: dict[str, Any]) -> TransactionMessage | PoisonMessage:
    try:
        return TransactionMessage.parse(message.get("Body", ""))
    except PoisonMessage as exc:
        return exc
