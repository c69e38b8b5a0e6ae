"""A packed message: one SQS message carrying several transactions of one request (schema
version 2, relay_core.queue), worked on as one message per transaction.

On receipt it is unpacked (:func:`unpack`) into one view per transaction: the SQS message as
that transaction's own message would be (its body and ``transactionId`` attribute, schema
version 1), with the packed message's receipt handle, receive count and message id, and a
:class:`Packed` shared by the views. Each view's work goes through the stages like any
message's and ends in the settler, which hands its plan to :meth:`Packed.settled` instead of
acting on the shared handle. When the last of them is settled:

* a transaction that is done (plan: delete) needs nothing more;
* one with work left (a back-off, a requeue) goes on in a message of its own, sent with the
  plan's delay (at most SQS's 15 minutes; a back-off counts a transaction's own failed
  attempts, not receives, so a fresh copy changes none of it: queue_consumer.retry). One that
  failed unexpectedly (``error``, never requeued) goes on likewise: its copy is then a message
  like any other, which SQS's redrive takes to the DLQ after its own receives (the packed one
  is never made again, so its count starts over once at most);
* one to dead-letter is sent to the DLQ in its own message, with the reason;

and then the packed message is deleted, unless a copy could not be sent: then it comes back
(as soon as that copy was due), and whatever was done is dropped by its row's claim. A view
whose work ended without a plan (cancelled at shutdown, an unexpected error before settling)
leaves the packed message to come back after its visibility timeout, every transaction in it
looked at again. Nothing is lost and nothing runs twice: each row decides from its own state,
as for duplicate messages."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from queue_consumer.retry import MAX_DELAY_S, Action, Plan
from queue_consumer.stages.outcome import Outcome
from relay_core.queue import TransactionMessage

if TYPE_CHECKING:
    from queue_consumer.lanes import Lane
    from queue_consumer.stages.settling import Settler

# The key of a view's shared state in its message dict (the consumer's own: never sent).
PACKED = "relay.packed"


@dataclass(slots=True)
class _Left:
    """A transaction of the packed message whose work goes on in a message of its own."""

    view: dict[str, Any]
    plan: Plan
    outcome: Outcome
    receive_count: int
    dead_letter: bool


@dataclass(slots=True)
class Packed:
    handle: str
    waiting: int
    keep_s: int | None = None  # keep the packed message (a copy not sent): back after this
    left: list[_Left] = field(default_factory=list)

    async def settled(
        self,
        settler: Settler,
        lane: Lane,
        view: dict[str, Any],
        plan: Plan,
        outcome: Outcome,
        receive_count: int,
    ) -> None:
        """One transaction's plan (the settler's, for its view); the last one settles the
        packed message."""
        if plan.action is not Action.delete:
            dead = plan.action is Action.dead_letter
            self.left.append(_Left(view, plan, outcome, receive_count, dead_letter=dead))
        await self._one_less(settler, lane)

    def _keep(self, delay_s: int) -> None:
        self.keep_s = delay_s if self.keep_s is None else min(self.keep_s, delay_s)

    async def _one_less(self, settler: Settler, lane: Lane) -> None:
        self.waiting -= 1
        if self.waiting > 0:  # one never settled (its work cut off) keeps it waiting: it comes back
            return
        for left in self.left:
            if left.dead_letter:
                sent = await settler.send_dead_letter(
                    lane, left.view, left.outcome, left.receive_count
                )
            else:
                delay_s = min(left.plan.delay_s, MAX_DELAY_S)
                sent = await settler.send_copy(lane, left.view, delay_s)
            if not sent:  # back with everything in it, as soon as this one is due
                self._keep(max(1, min(left.plan.delay_s, MAX_DELAY_S)))
        if self.keep_s is None:
            lane.deleter.add(self.handle)
        else:
            await settler.set_visibility(lane, self.handle, self.keep_s)


def unpack(message: dict[str, Any], bodies: list[TransactionMessage]) -> list[dict[str, Any]]:
    """The views of a packed message's transactions (:class:`Packed` shared by them)."""
    packed = Packed(handle=message["ReceiptHandle"], waiting=len(bodies))
    attributes = dict(message.get("MessageAttributes") or {})
    attributes.pop("schemaVersion", None)
    views = []
    for body in bodies:
        own = TransactionMessage.new(body.transaction_id, body.type, timestamp=body.timestamp)
        # Its own attributes over the packed message's (whose requestId and traceparent stay).
        own_attributes = {**attributes, **own.attributes()}
        views.append(
            {**message, "Body": own.body(), "MessageAttributes": own_attributes, PACKED: packed}
        )
    return views


def packed_of(message: dict[str, Any]) -> Packed | None:
    found = message.get(PACKED)
    return found if isinstance(found, Packed) else None
