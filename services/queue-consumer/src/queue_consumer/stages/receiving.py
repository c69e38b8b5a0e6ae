"""Receiving: a poll loop per lane, which receives a batch while the lane may, parses each
message, loads the batch's rows in one query and starts each message's work once it has room.

What a poller does next, receive now or wait (and for what), is one decision per turn of its
loop (``decide``), so that the rules that decide whether work is received live in one place
and can be checked as a state machine (tests/test_receiving_liveness.py; the liveness argument
is in ``circuit.py``):

* a lane an operator paused receives nothing until it is switched on again;
* while a circuit (the executor's, the database's) is not closed, no lane receives: messages
  wait in SQS without spending receive counts. Whatever lane holds the work, the circuit is
  probed by the consumer itself (``probe_due``), so no lane waits on another lane's traffic;
* otherwise every lane receives, the fast one before the normal one for room
  (``lanes.Capacity``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from queue_consumer.circuit import Circuit, CircuitBreaker, CircuitState
from queue_consumer.lanes import Capacity, Lane
from queue_consumer.settings import ConsumerSettings
from queue_consumer.stages.claiming import Claims
from queue_consumer.stages.packed import unpack
from relay_core.db.models import Transaction
from relay_core.queue import PoisonMessage, TransactionMessage

log = logging.getLogger(__name__)

Body = TransactionMessage | PoisonMessage


@dataclass(frozen=True, slots=True)
class Receive:
    """Ask SQS for up to ``count`` messages now."""

    count: int


@dataclass(frozen=True, slots=True)
class Wait:
    """Receive nothing until ``until`` (a time on the circuit's clock), or, when asked, until
    ``circuit`` changes or the lane is switched on again."""

    reason: str
    until: float | None = None
    circuit: Circuit | None = None
    switch: bool = False


def decide(lane: Lane, circuits: Sequence[Circuit]) -> Receive | Wait:
    if not lane.receiving.is_set():  # paused by an operator: receive nothing
        return Wait("paused", switch=True)
    for circuit in circuits:
        state = circuit.state
        if state is CircuitState.open:
            return Wait(f"{circuit.name} circuit open", until=circuit.reopens_at, circuit=circuit)
        if state is CircuitState.half_open:
            return Wait(f"{circuit.name} circuit probing", circuit=circuit)
    return Receive(10)


def probe_due(circuit: CircuitBreaker) -> bool:
    """Whether the consumer should probe ``circuit`` itself now: it is half-open and no call
    (the prober's, or a message's that reached it first) is testing it."""
    return circuit.probe_due()


class Admission:
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


# What the receiver hands each message to: (lane, message, body, row snapshot, its batch's
# admission while it waits for room, or None when the poller took room for it already).
Start = Callable[[Lane, dict[str, Any], Body, Transaction | None, Admission | None], None]


class Receiver:
    def __init__(
        self,
        settings: ConsumerSettings,
        sqs: Any,
        capacity: Capacity,
        circuits: Sequence[Circuit],
        claims: Claims,
        start: Start,
        sqs_back: Callable[[], None],
    ) -> None:
        """``start``: begins one message's work; ``sqs_back``: SQS answers again after
        failing."""
        self.sqs = sqs
        self.capacity = capacity
        self.circuits = circuits
        self.claims = claims
        self.start = start
        self.sqs_back = sqs_back
        self.wait_time_s = settings.consumer_wait_time_s
        self.in_receive: set[asyncio.Task[Any]] = set()  # pollers inside a ReceiveMessage
        self.sqs_failing = False

    async def poll(self, lane: Lane, index: int, stopping: asyncio.Event) -> None:
        """Receive from ``lane`` while it is switched on, a batch at a time, and start each
        message, which then waits for its room (``Capacity``; the fast lane's are given room
        before the normal lane's). The next receive waits until every message of the batch
        has room: a poller holds at most one batch that is not yet being worked on.

        Room is taken a message at a time, once it has arrived: a slot that frees goes to a
        waiting message at once, instead of staying empty while a poller gathers a batch's
        worth of room and then receives (each slot's turn was ~5 % longer that way)."""
        while not stopping.is_set():
            decision = decide(lane, self.circuits)
            if isinstance(decision, Wait):
                await self._wait(lane, decision)
                continue
            messages = await self._receive(lane, index, decision.count)
            if messages is None:
                await asyncio.sleep(1.0)
                continue
            if messages:
                await self._start_batch(lane, messages)

    async def _receive(self, lane: Lane, index: int, count: int) -> list[dict[str, Any]] | None:
        """A batch (empty after a long poll that found none), or None when SQS failed."""
        me = asyncio.current_task()
        try:
            if me is not None:
                self.in_receive.add(me)
            try:
                response = await self.sqs.receive_message(
                    QueueUrl=lane.queue_url,
                    MaxNumberOfMessages=min(count, self.capacity.batch(lane.urgent)),
                    WaitTimeSeconds=self.wait_time_s,
                    AttributeNames=["ApproximateReceiveCount"],
                    MessageAttributeNames=["All"],
                )
            finally:
                self.in_receive.discard(me)
            messages: list[dict[str, Any]] = response.get("Messages", [])
        except Exception as exc:
            log.warning(
                "consumer.receive_failed",
                extra={"lane": lane.name, "poller": index, "error": str(exc)},
            )
            self.sqs_failing = True
            return None
        if self.sqs_failing:
            self.sqs_failing = False
            self.sqs_back()
        lane.quiet = not messages
        return messages

    async def _start_batch(self, lane: Lane, messages: list[dict[str, Any]]) -> None:
        # A packed message (several transactions of one request) is one piece of work per
        # transaction, each with its own view of the message (stages.packed).
        work: list[tuple[dict[str, Any], Body]] = []
        for message in messages:
            bodies = parse(message)
            named = [body for body in bodies if isinstance(body, TransactionMessage)]
            if len(named) > 1:
                work.extend(zip(unpack(message, named), named, strict=True))
            else:
                work.append((message, bodies[0]))
        try:
            # One SELECT for the batch; each message still decides and claims on its own.
            snapshots = await self.claims.load_many(
                [body.transaction_id for _, body in work if isinstance(body, TransactionMessage)]
            )
        except Exception as exc:  # each message loads its row itself and fails on its own
            log.warning("consumer.batch_load_failed", extra={"error": str(exc)})
            snapshots = {}
        admission = Admission()
        for message, body in work:
            # Each row object goes to one message: two copies of a message in one batch must
            # not share (and update) the same snapshot; the second loads its own.
            snapshot = (
                snapshots.pop(body.transaction_id, None)
                if isinstance(body, TransactionMessage)
                else None
            )
            # Room now if there is some (most often); otherwise the message waits for it.
            waiting = None if self.capacity.take_now(urgent=lane.urgent) else admission
            if waiting is not None:
                waiting.expect_one()
            self.start(lane, message, body, snapshot, waiting)
        if admission.expected:
            await admission.all_in.wait()

    async def _wait(self, lane: Lane, decision: Wait) -> None:
        if decision.switch:
            lane.parked += 1
            try:
                await lane.receiving.wait()
            finally:
                lane.parked -= 1
        elif decision.circuit is not None:
            await decision.circuit.wait_change(decision.until)

    async def stop(self, pollers: list[asyncio.Task[None]]) -> None:
        """A poller inside a long poll finishes it; the others stop at once. A receive cut off
        by the client may still be answered by SQS with messages nobody reads, and those stay
        hidden for the whole visibility timeout (a minute of delay at every deploy)."""
        for task in pollers:
            if task not in self.in_receive:
                task.cancel()
        _, late = await asyncio.wait(pollers, timeout=self.wait_time_s + 5)
        for task in late:
            task.cancel()
        await asyncio.gather(*pollers, return_exceptions=True)


def parse(message: dict[str, Any]) -> list[Body]:
    """The transactions a message names (several when packed), or why it names none."""
    try:
        return list(TransactionMessage.parse(message.get("Body", "")))
    except PoisonMessage as exc:
        return [exc]
