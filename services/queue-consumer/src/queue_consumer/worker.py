"""The SQS side: a poll loop per lane, per-message timeouts, visibility heartbeats, the
housekeeping loops (reaper, reconciler, tracker, notifier, the operator's switch, the circuits'
probes), and a graceful drain on SIGTERM. Around it, each in its own module: the lanes, their
batched deletes and the room they share (``lanes.py``), what a poller does next
(``receiving.py``), the executor and database circuits (``circuit.py``: while one is open,
messages wait in SQS), and the operator's switch (``switch.py``: paused, a lane receives
nothing)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy.exc

from queue_consumer import metrics, receiving
from queue_consumer.circuit import CircuitBreaker, probe_when_due
from queue_consumer.lanes import Capacity, Deleter, Lane
from queue_consumer.notifications.service import Notifier
from queue_consumer.retry import Action, Failure, Policy, plan_retry
from queue_consumer.settings import ConsumerSettings
from queue_consumer.switch import Switch
from queue_consumer.tracking.receipts import FeeSettler
from queue_consumer.tracking.service import Tracker
from queue_consumer.transactions.service import Outcome, TransactionProcessor
from relay_core import tracing
from relay_core.db.models import Transaction
from relay_core.queue import PoisonMessage, TransactionMessage, trace_attributes
from relay_core.reconcile import Reconciler

log = logging.getLogger(__name__)


@dataclass
class Stats:
    counts: Counter[str] = field(default_factory=Counter)
    started: float = field(default_factory=time.monotonic)

    def summary(self) -> dict[str, Any]:
        return {"uptime_s": round(time.monotonic() - self.started, 1), **dict(self.counts)}


class Consumer:
    def __init__(
        self,
        settings: ConsumerSettings,
        sqs: Any,
        lanes: dict[str, tuple[str, str]],
        processor: TransactionProcessor,
    ) -> None:
        """``lanes``: each lane's (queue URL, DLQ URL); the fast lane, when there is one,
        is received first (``Capacity``)."""
        self.settings = settings
        self.sqs = sqs
        self.processor = processor
        self.lanes = [
            Lane(
                name,
                queue_url,
                dlq_url,
                Deleter(sqs, queue_url),
                settings.consumer_fast_pollers if name == "fast" else settings.consumer_pollers,
            )
            for name, (queue_url, dlq_url) in lanes.items()
        ]
        for lane in self.lanes:
            lane.receiving.set()
        fast = [lane for lane in self.lanes if lane.urgent]
        self.capacity = Capacity(
            settings.consumer_concurrency,
            settings.consumer_pollers,
            fair_every=settings.consumer_fast_lane_run,
            # one batch per fast poller is always there for the fast lane
            headroom=sum(10 * lane.pollers for lane in fast),
        )
        self.policy = Policy(
            max_receive_count=settings.queue_max_receive_count,
            base_s=settings.consumer_backoff_base_s,
            cap_s=settings.consumer_backoff_cap_s,
        )
        self.stats = Stats()
        self.stopping = asyncio.Event()
        self._work: set[asyncio.Task[None]] = set()
        self._in_receive: set[asyncio.Task[Any]] = set()  # pollers inside a ReceiveMessage
        self._visibility = settings.queue_visibility_timeout_s
        self._heartbeat_interval = max(self._visibility / 2, 1)
        self.last_poll = time.monotonic()
        self._sqs_failing = False
        self._requeueing: asyncio.Task[None] | None = None
        self.breaker: CircuitBreaker = processor.guard.breaker
        # Nothing can be claimed or recorded while the database does not answer: its circuit
        # stops the pollers as the executor's does, and a probe of its own reopens them.
        self.database = CircuitBreaker(
            name="database",
            failure_threshold=settings.circuit_failure_threshold,
            cooldown_s=settings.circuit_cooldown_s,
            cooldown_cap_s=settings.circuit_cooldown_cap_s,
            is_outage=database_down,
        )
        self.circuits = (self.breaker, self.database)
        self.tracker: Tracker | None = None
        self.settler: FeeSettler | None = None
        self.notifier: Notifier | None = None
        self.reconciler: Reconciler | None = None
        self.switch = Switch(
            self.lanes,
            processor.sessions,
            sqs,
            settings.consumer_id,
            circuit=lambda: self.breaker.state.value,
        )
        metrics.watch(lambda: len(self._work), lambda: self.breaker.state.value)

    def lane(self, name: str) -> Lane:
        return next(lane for lane in self.lanes if lane.name == name)

    # --- lifecycle --------------------------------------------------------------------------

    async def run(self) -> dict[str, Any]:
        """Consume until ``stopping`` is set, then drain. Returns the summary."""
        self.processor.writes.start()
        for lane in self.lanes:
            lane.deleter.start()
        # A consumer started while a lane is paused (a deploy, autoscaling) must not receive
        # from it before it has read the switch.
        with contextlib.suppress(Exception):
            await self.switch.follow()
        if self.reconciler is not None:  # how old the queues are now, to tell if they change
            with contextlib.suppress(Exception):
                await self.reconciler.requeue_lost()
        pollers = [
            asyncio.create_task(self._poll(lane, i), name=f"poller-{lane.name}-{i}")
            for lane in self.lanes
            for i in range(lane.pollers)
        ]
        housekeeping = [
            asyncio.create_task(self._reaper(), name="reaper"),
            asyncio.create_task(self._heartbeat_file(), name="heartbeat-file"),
            asyncio.create_task(
                self.switch.watch(self.settings.consumer_control_interval_s), name="switch"
            ),
            asyncio.create_task(
                probe_when_due(
                    self.breaker,
                    self.processor.probe_executor,
                    self.settings.executor_timeout_s,
                ),
                name="executor-probe",
            ),
            asyncio.create_task(
                probe_when_due(
                    self.database,
                    self.processor.probe_database,
                    self.settings.database_connect_timeout_s
                    + self.settings.database_pool_timeout_s,
                ),
                name="database-probe",
            ),
        ]
        if self.tracker is not None:
            housekeeping.append(
                asyncio.create_task(
                    self._every(self.settings.tracker_interval_s, self.tracker.run_once, "tracker"),
                    name="tracker",
                )
            )
        if self.settler is not None:
            housekeeping.append(
                asyncio.create_task(
                    self._every(self.settings.tracker_interval_s, self.settler.run_once, "fees"),
                    name="fee-settler",
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
        for task in housekeeping:
            task.cancel()
        await self._stop_pollers(pollers)
        if self._requeueing is not None:
            housekeeping.append(self._requeueing)
        await asyncio.gather(*housekeeping, return_exceptions=True)
        abandoned = await self._drain(self.settings.consumer_grace_s)
        await self.processor.writes.stop()
        for lane in self.lanes:
            await lane.deleter.stop()
        with contextlib.suppress(Exception):
            await self.switch.report(stopped=True)
        summary = self.stats.summary() | {
            "abandoned": abandoned,
            "circuitOpened": self.breaker.opened,
            "notified": self.notifier.delivered if self.notifier else 0,
        }
        log.info("consumer.stopped", extra=summary)
        return summary

    async def _stop_pollers(self, pollers: list[asyncio.Task[None]]) -> None:
        """A poller inside a long poll finishes it; the others stop at once. A receive cut off
        by the client may still be answered by SQS with messages nobody reads, and those stay
        hidden for the whole visibility timeout (a minute of delay at every deploy)."""
        for task in pollers:
            if task not in self._in_receive:
                task.cancel()
        _, late = await asyncio.wait(pollers, timeout=self.settings.consumer_wait_time_s + 5)
        for task in late:
            task.cancel()
        await asyncio.gather(*pollers, return_exceptions=True)

    async def _drain(self, grace_s: float) -> int:
        if not self._work:
            return 0
        _, pending = await asyncio.wait(set(self._work), timeout=grace_s)
        for task in pending:  # their messages reappear after the visibility timeout
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        return len(pending)

    # --- polling ----------------------------------------------------------------------------

    async def _poll(self, lane: Lane, index: int) -> None:
        """Receive from ``lane`` while it is switched on, a batch at a time, and start each
        message, which then waits for its room (``Capacity``; the fast lane's are given room
        before the normal lane's). The next receive waits until every message of the batch
        has room: a poller holds at most one batch that is not yet being worked on.

        Room is taken a message at a time, once it has arrived: a slot that frees goes to a
        waiting message at once, instead of staying empty while a poller gathers a batch's
        worth of room and then receives (each slot's turn was ~5 % longer that way)."""
        while not self.stopping.is_set():
            decision = receiving.decide(lane, self.circuits)
            if isinstance(decision, receiving.Wait):
                await self._wait(lane, decision)
                continue
            me = asyncio.current_task()
            try:
                if me is not None:
                    self._in_receive.add(me)
                try:
                    response = await self.sqs.receive_message(
                        QueueUrl=lane.queue_url,
                        MaxNumberOfMessages=min(decision.count, self.capacity.batch(lane.urgent)),
                        WaitTimeSeconds=self.settings.consumer_wait_time_s,
                        AttributeNames=["ApproximateReceiveCount"],
                        MessageAttributeNames=["All"],
                    )
                finally:
                    self._in_receive.discard(me)
                messages = response.get("Messages", [])
            except Exception as exc:
                log.warning(
                    "consumer.receive_failed",
                    extra={"lane": lane.name, "poller": index, "error": str(exc)},
                )
                self._sqs_failing = True
                await asyncio.sleep(1.0)
                continue
            if self._sqs_failing:
                self._after_sqs_outage()
            self.last_poll = time.monotonic()
            lane.quiet = not messages
            if not messages:
                continue
            parsed = [_parse(message) for message in messages]
            try:
                # One SELECT for the batch; each message still decides and claims on its own.
                snapshots = await self.processor.load_many(
                    [p.transaction_id for p in parsed if isinstance(p, TransactionMessage)]
                )
            except Exception as exc:  # each message loads its row itself and fails on its own
                log.warning("consumer.batch_load_failed", extra={"error": str(exc)})
                snapshots = {}
            admission = _Admission()
            for message, body in zip(messages, parsed, strict=True):
                # Each row object goes to one message: two copies of a message in one batch
                # must not share (and update) the same snapshot; the second loads its own.
                snapshot = (
                    snapshots.pop(body.transaction_id, None)
                    if isinstance(body, TransactionMessage)
                    else None
                )
                # Room now if there is some (most often); otherwise the message waits for it.
                waiting = None if self.capacity.take_now(urgent=lane.urgent) else admission
                if waiting is not None:
                    waiting.expect_one()
                task = asyncio.create_task(self._handle(lane, message, body, snapshot, waiting))
                self._work.add(task)
                lane.work.add(task)
                task.add_done_callback(self._work.discard)
                task.add_done_callback(lane.work.discard)
            if admission.expected:
                await admission.all_in.wait()

    async def _wait(self, lane: Lane, decision: receiving.Wait) -> None:
        if decision.switch:
            lane.parked += 1
            try:
                await lane.receiving.wait()
            finally:
                lane.parked -= 1
        elif decision.circuit is not None:
            await decision.circuit.wait_change(decision.until)

    def _after_sqs_outage(self) -> None:
        """SQS answers again after failing: if it came back without the queue's messages (a
        queue made again, a local server restarted empty), their rows are enqueued again now
        rather than at the next reconciler pass (relay_core.reconcile)."""
        self._sqs_failing = False
        if self.reconciler is None or (self._requeueing and not self._requeueing.done()):
            return
        self._requeueing = asyncio.create_task(self._requeue_lost(), name="requeue-lost")

    async def _requeue_lost(self) -> None:
        assert self.reconciler is not None
        try:
            report = await self.reconciler.requeue_lost()
            self.stats.counts["requeued_by_reconciler"] += report.requeued
        except Exception as exc:
            log.warning("consumer.requeue_lost_failed", extra={"error": str(exc)[:200]})

    # --- one message ------------------------------------------------------------------------

    async def _handle(
        self,
        lane: Lane,
        message: dict[str, Any],
        body: TransactionMessage | PoisonMessage,
        snapshot: Transaction | None,
        admission: _Admission | None,
    ) -> None:
        """``admission``: the message's batch, while it waits for room; None when its poller
        took room for it already."""
        holds_room = admission is None
        if admission is not None:
            try:
                await self.capacity.reserve(1, urgent=lane.urgent)
                holds_room = True
            finally:
                admission.one_in()
        try:
            await self._work_on(lane, message, body, snapshot)
        finally:
            if holds_room:
                await self.capacity.release()

    async def _work_on(
        self,
        lane: Lane,
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
        # This task's own context: the accepting request's id and trace go on every log line
        # and on the executor calls made for this message.
        request_id, traceparent = trace_attributes(message)
        trace = tracing.begin(request_id, traceparent, name="relay.process", kind="consumer")
        tracing.activate(trace)
        try:
            self.stats.counts["received"] += 1
            lane.received += 1
            metrics.RECEIVED.inc(lane.name)
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
                        asyncio.create_task(self._keep_invisible(lane, message, tx_message, done))
                    ),
                )
                outcome = await self._attempt(body, str(message.get("MessageId")), snapshot)
                self.database.record(outcome.database_error, probe=False)
            await self._apply(lane, message, outcome, receive_count, context, started)
        except asyncio.CancelledError:
            # Shutdown past the grace period: leave the message to reappear.
            self.stats.counts["abandoned"] += 1
            raise
        except Exception:
            self.stats.counts["errors"] += 1
            metrics.FAILED.inc(lane.name, "error")
            log.exception("consumer.message.error", extra=context)
        finally:
            if trace.span is not None:
                tracing.finish(trace, attributes=context)
            done.set()
            if timer is not None:
                timer.cancel()
            for task in heartbeat:
                # Let a visibility change or claim touch in progress finish rather than cut a
                # database call in half.
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(task, 10)

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
            if database_down(exc):
                # Nothing was recorded: the message waits for the database, not for a back-off
                # of its own (the database circuit stops the pollers if this goes on).
                return Outcome(
                    Failure.deferred,
                    reason,
                    retry_after_s=self.database.retry_in() + random.uniform(1, 3),
                    action="database_error",
                    database_error=exc,
                )
            if isinstance(exc, sqlalchemy.exc.SQLAlchemyError):  # it answered, with an error
                return Outcome(Failure.transient, reason, action="database_error")
            log.exception(
                "consumer.message.unexpected", extra={"transactionId": parsed.transaction_id}
            )
            return Outcome(Failure.error, reason, action="error")

    async def _apply(
        self,
        lane: Lane,
        message: dict[str, Any],
        outcome: Outcome,
        receive_count: int,
        context: dict[str, Any],
        started: float,
    ) -> None:
        plan = plan_retry(
            outcome.failure,
            receive_count,
            self.policy,
            retry_after_s=outcome.retry_after_s,
            attempts=outcome.attempts,
        )
        handle = message["ReceiptHandle"]
        if plan.action is Action.delete:
            lane.deleter.add(handle)
        elif plan.action is Action.backoff:
            await self._set_visibility(lane, handle, plan.delay_s)
        elif plan.action is Action.dead_letter:
            await self._dead_letter(lane, message, outcome, receive_count)
        else:
            await self._requeue(lane, message, plan.delay_s)
        self.stats.counts[plan.action.value] += 1
        self.stats.counts[outcome.action] += 1
        elapsed = time.monotonic() - started
        metrics.PROCESSED.inc(lane.name, outcome.action, plan.action.value)
        metrics.MESSAGE_SECONDS.observe(lane.name, elapsed)
        if outcome.failure is not None:
            metrics.FAILED.inc(lane.name, outcome.failure.value)
        level = logging.INFO if outcome.failure is None else logging.WARNING
        log.log(
            level,
            "consumer.message.handled",
            extra={
                **context,
                "lane": lane.name,
                "action": outcome.action,
                "plan": plan.action.value,
                "delay_s": plan.delay_s or None,
                "receiveCount": receive_count,
                "duration_ms": round(elapsed * 1000, 1),
                "error": outcome.reason or None,
            },
        )

    async def _set_visibility(self, lane: Lane, handle: str, seconds: int) -> None:
        try:
            await self.sqs.change_message_visibility(
                QueueUrl=lane.queue_url, ReceiptHandle=handle, VisibilityTimeout=seconds
            )
        except Exception as exc:
            log.warning("consumer.visibility_failed", extra={"error": str(exc)})

    async def _dead_letter(
        self, lane: Lane, message: dict[str, Any], outcome: Outcome, count: int
    ) -> None:
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
            QueueUrl=lane.dlq_url,
            MessageBody=message.get("Body") or "<empty>",
            MessageAttributes=attributes,
        )
        lane.deleter.add(message["ReceiptHandle"])

    async def _requeue(self, lane: Lane, message: dict[str, Any], delay_s: int) -> None:
        """The last allowed receive of a message that still has work: a fresh copy carries
        it on (delayed like a back-off), so SQS's redrive never takes a live transaction."""
        try:
            await self.sqs.send_message(
                QueueUrl=lane.queue_url,
                MessageBody=message.get("Body") or "",
                MessageAttributes=dict(message.get("MessageAttributes") or {}),
                DelaySeconds=delay_s,
            )
        except Exception as exc:
            # Then the redrive takes it; the reconciler finds its row (docs/runbook.md).
            log.error("consumer.requeue_failed", extra={"error": str(exc)})
            await self._set_visibility(lane, message["ReceiptHandle"], delay_s)
            return
        lane.deleter.add(message["ReceiptHandle"])

    async def _keep_invisible(
        self,
        lane: Lane,
        message: dict[str, Any],
        parsed: TransactionMessage,
        done: asyncio.Event,
    ) -> None:
        """Work that outlives half the visibility timeout extends it (and the claim), then again
        every half timeout until it ends. Started by a timer after the first half."""
        while not done.is_set():
            await self._set_visibility(lane, message["ReceiptHandle"], self._visibility)
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
        """One reconciler pass, unless the executor circuit is open or a lane is paused: then
        messages wait in SQS on purpose and their rows only look stranded."""
        paused = any(not lane.receiving.is_set() for lane in self.lanes)
        outage = not all(circuit.closed for circuit in self.circuits)
        if self.reconciler is None or outage or paused:
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

    async def _heartbeat_file(self) -> None:
        """Every 5 s the heartbeat file (``queue-consumer --check``); every 30 s a
        ``consumer.heartbeat`` log line, which infra/ turns into CloudWatch metrics (a consumer
        gone quiet, a circuit open for long) by metric filters on the log group."""
        path = Path(self.settings.consumer_heartbeat_file)
        beats = 0
        while True:
            with contextlib.suppress(OSError):
                await asyncio.to_thread(path.write_text, f"{time.time():.0f}\n")
            if beats % 6 == 0:
                log.info(
                    "consumer.heartbeat",
                    extra={
                        "consumer": self.settings.consumer_id,
                        "lanes": {lane.name: self.switch.state(lane) for lane in self.lanes},
                        "circuit": self.breaker.state.value,
                        "databaseCircuit": self.database.state.value,
                        "inFlight": len(self._work),
                        "received": self.stats.counts["received"],
                    },
                )
            beats += 1
            await asyncio.sleep(5)


class _Admission:
    """The messages of a received batch that wait for room: ``all_in`` once each has it (or
    gave up waiting for it, cancelled at shutdown)."""

    def __init__(self) -> None:
        self.expected = 0
        self._waiting = 0
        self.all_in = asyncio.Event()

    def expect_one(self) -> None:
        self.expected += 1
        self._waiting += 1

    def one_in(self) -> None:
        self._waiting -= 1
        if self._waiting <= 0:
            self.all_in.set()


def database_down(error: BaseException) -> bool:
    """The database did not answer (rather than refusing a statement)."""
    return isinstance(
        error,
        sqlalchemy.exc.OperationalError
        | sqlalchemy.exc.InterfaceError
        | sqlalchemy.exc.TimeoutError
        | OSError
        | TimeoutError,
    )


def _parse(message: dict[str, Any]) -> TransactionMessage | PoisonMessage:
    try:
        return TransactionMessage.parse(message.get("Body", ""))
    except PoisonMessage as exc:
        return exc
