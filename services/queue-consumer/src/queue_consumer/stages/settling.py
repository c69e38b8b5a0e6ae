"""Settling: what happens to a message once its attempt has an outcome (``retry.plan_retry``
decides): deleted (batched, ``lanes.Deleter``), hidden for a back-off, requeued as a fresh copy
on its last allowed receive, or dead-lettered with the reason. And while an attempt outlives
half the visibility timeout, its heartbeat keeps the message hidden and the claim touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from queue_consumer import metrics
from queue_consumer.lanes import Lane
from queue_consumer.retry import Action, Policy, plan_retry
from queue_consumer.settings import ConsumerSettings
from queue_consumer.stages.outcome import Outcome
from queue_consumer.stages.packed import packed_of

log = logging.getLogger(__name__)


class Settler:
    def __init__(self, settings: ConsumerSettings, sqs: Any, counts: Counter[str]) -> None:
        self.sqs = sqs
        self.counts = counts
        self.policy = Policy(
            max_receive_count=settings.queue_max_receive_count,
            base_s=settings.consumer_backoff_base_s,
            cap_s=settings.consumer_backoff_cap_s,
        )
        self.visibility_s = settings.queue_visibility_timeout_s
        self.heartbeat_s = max(self.visibility_s / 2, 1)

    async def settle(
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
        packed = packed_of(message)
        if packed is not None:  # one transaction of several: the last one settles them all
            await packed.settled(self, lane, message, plan, outcome, receive_count)
        elif plan.action is Action.delete:
            lane.deleter.add(handle)
        elif plan.action is Action.backoff:
            await self.set_visibility(lane, handle, plan.delay_s)
        elif plan.action is Action.dead_letter:
            await self._dead_letter(lane, message, outcome, receive_count)
        else:
            await self._requeue(lane, message, plan.delay_s)
        self.counts[plan.action.value] += 1
        self.counts[outcome.action] += 1
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

    async def set_visibility(self, lane: Lane, handle: str, seconds: int) -> None:
        try:
            await self.sqs.change_message_visibility(
                QueueUrl=lane.queue_url, ReceiptHandle=handle, VisibilityTimeout=seconds
            )
        except Exception as exc:
            log.warning("consumer.visibility_failed", extra={"error": str(exc)})

    async def _dead_letter(
        self, lane: Lane, message: dict[str, Any], outcome: Outcome, count: int
    ) -> None:
        await self.send_dead_letter(lane, message, outcome, count, quiet=False)
        lane.deleter.add(message["ReceiptHandle"])

    async def send_dead_letter(
        self,
        lane: Lane,
        message: dict[str, Any],
        outcome: Outcome,
        count: int,
        *,
        quiet: bool = True,
    ) -> bool:
        """A copy of ``message`` into the DLQ, with the reason; whether SQS took it (``quiet``:
        False raises instead)."""
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
        try:
            await self.sqs.send_message(
                QueueUrl=lane.dlq_url,
                MessageBody=message.get("Body") or "<empty>",
                MessageAttributes=attributes,
            )
        except Exception as exc:
            if not quiet:
                raise
            log.error("consumer.dead_letter_failed", extra={"error": str(exc)})
            return False
        return True

    async def _requeue(self, lane: Lane, message: dict[str, Any], delay_s: int) -> None:
        """The last allowed receive of a message that still has work: a fresh copy carries
        it on (delayed like a back-off), so SQS's redrive never takes a live transaction."""
        if not await self.send_copy(lane, message, delay_s):
            # Then the redrive takes it; the reconciler finds its row (docs/runbook.md).
            await self.set_visibility(lane, message["ReceiptHandle"], delay_s)
            return
        lane.deleter.add(message["ReceiptHandle"])

    async def send_copy(self, lane: Lane, message: dict[str, Any], delay_s: int) -> bool:
        """A fresh copy of ``message`` into its queue, delayed; whether SQS took it."""
        try:
            await self.sqs.send_message(
                QueueUrl=lane.queue_url,
                MessageBody=message.get("Body") or "",
                MessageAttributes=dict(message.get("MessageAttributes") or {}),
                DelaySeconds=delay_s,
            )
        except Exception as exc:
            log.error("consumer.requeue_failed", extra={"error": str(exc)})
            return False
        return True

    def heartbeat(
        self, lane: Lane, message: dict[str, Any], touch: Callable[[], Awaitable[None]]
    ) -> Heartbeat:
        """Arm the heartbeat of a message's work (``Heartbeat``)."""
        return Heartbeat(self, lane, message, touch)


class Heartbeat:
    """Work that outlives half the visibility timeout extends it (and ``touch``es the claim),
    then again every half timeout until it ends. Most messages finish long before, and get no
    task: a timer starts one after the first half."""

    def __init__(
        self,
        settler: Settler,
        lane: Lane,
        message: dict[str, Any],
        touch: Callable[[], Awaitable[None]],
    ) -> None:
        self.settler = settler
        self.lane = lane
        self.handle = message["ReceiptHandle"]
        self.touch = touch
        self.done = asyncio.Event()
        self.beats: list[asyncio.Task[None]] = []
        self.timer = asyncio.get_running_loop().call_later(settler.heartbeat_s, self._start)

    def _start(self) -> None:
        self.beats.append(asyncio.create_task(self._keep_invisible()))

    async def stop(self) -> None:
        """The work ended: a visibility change or claim touch in progress finishes rather
        than a database call being cut in half."""
        self.done.set()
        self.timer.cancel()
        for task in self.beats:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 10)

    async def _keep_invisible(self) -> None:
        settler = self.settler
        while not self.done.is_set():
            await settler.set_visibility(self.lane, self.handle, settler.visibility_s)
            with contextlib.suppress(Exception):
                await self.touch()
            settler.counts["heartbeats"] += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.done.wait(), settler.heartbeat_s)
