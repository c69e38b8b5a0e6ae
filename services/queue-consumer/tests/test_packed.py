"""A packed message (several transactions of one request) settles once all of its transactions
are settled: what is left to do for one goes on in a message of its own (queue_consumer.stages.
packed). These drive :class:`Packed` with a recording settler; test_processing's packed tests
run it against SQS, MariaDB and the relayer-stub."""

from __future__ import annotations

import uuid
from typing import Any

from queue_consumer.retry import Action, Failure, Plan, Policy
from queue_consumer.stages.outcome import Outcome
from queue_consumer.stages.packed import PACKED, Packed, packed_of, unpack
from relay_core import jsonutil, tracing
from relay_core.queue import TransactionMessage, packed_entry
from relay_core.statuses import TxType


class _Deleter:
    def __init__(self) -> None:
        self.handles: list[str] = []

    def add(self, handle: str) -> None:
        self.handles.append(handle)


class _Lane:
    def __init__(self) -> None:
        self.deleter = _Deleter()


class _Settler:
    def __init__(self, *, fail_copies: bool = False) -> None:
        self.policy = Policy(max_receive_count=5)
        self.fail_copies = fail_copies
        self.copies: list[tuple[str, int]] = []
        self.dead: list[tuple[str, str]] = []
        self.visibility: list[tuple[str, int]] = []

    async def send_copy(self, lane: Any, view: dict[str, Any], delay_s: int) -> bool:
        self.copies.append((_named(view), delay_s))
        return not self.fail_copies

    async def send_dead_letter(
        self, lane: Any, view: dict[str, Any], outcome: Outcome, count: int
    ) -> bool:
        self.dead.append((_named(view), outcome.reason))
        return True

    async def set_visibility(self, lane: Any, handle: str, seconds: int) -> None:
        self.visibility.append((handle, seconds))


def _named(view: dict[str, Any]) -> str:
    return str(jsonutil.loads(view["Body"])["transactionId"])


def _packed_message(count: int) -> tuple[dict[str, Any], list[TransactionMessage]]:
    trace = tracing.Trace(request_id="req-9", trace_id="ab" * 16, span_id="cd" * 8, sampled=True)
    batch = TransactionMessage.many(
        [str(uuid.uuid4()) for _ in range(count)],
        TxType.direct,
        trace,
        ["normal"] * count,
        timestamp="2026-11-28T10:00:00.000Z",
    )
    entry = packed_entry(0, batch)
    message = {
        "MessageId": "sqs-1",
        "ReceiptHandle": "handle-1",
        "Body": entry["MessageBody"],
        "MessageAttributes": entry["MessageAttributes"],
        "Attributes": {"ApproximateReceiveCount": "2"},
    }
    return message, TransactionMessage.parse(entry["MessageBody"])


DONE = (Plan(Action.delete), Outcome.done("submitted"))


async def _settle(
    views: list[dict[str, Any]], plans: list[Any], settler: _Settler, lane: _Lane
) -> None:
    for view, (plan, outcome) in zip(views, plans, strict=True):
        packed = packed_of(view)
        assert packed is not None
        await packed.settled(settler, lane, view, plan, outcome, 2)  # type: ignore[arg-type]


def test_each_view_is_its_transactions_own_message_sharing_the_receipt() -> None:
    message, bodies = _packed_message(3)
    views = unpack(message, bodies)
    assert [_named(v) for v in views] == [b.transaction_id for b in bodies]
    shared = {id(packed_of(v)) for v in views}
    assert len(shared) == 1
    assert isinstance(views[0][PACKED], Packed)
    for view, body in zip(views, bodies, strict=True):
        assert (view["ReceiptHandle"], view["MessageId"]) == ("handle-1", "sqs-1")
        assert jsonutil.loads(view["Body"])["schemaVersion"] == 1
        attributes = view["MessageAttributes"]
        assert attributes["transactionId"]["StringValue"] == body.transaction_id
        assert attributes["schemaVersion"]["StringValue"] == "1"
        assert attributes["requestId"]["StringValue"] == "req-9"  # the accepting request's
        assert "traceparent" in attributes


async def test_the_packed_message_is_deleted_once_when_the_last_transaction_is_done() -> None:
    message, bodies = _packed_message(3)
    views, settler, lane = unpack(message, bodies), _Settler(), _Lane()
    await _settle(views[:2], [DONE, DONE], settler, lane)
    assert lane.deleter.handles == []  # not before the last
    await _settle(views[2:], [DONE], settler, lane)
    assert lane.deleter.handles == ["handle-1"]
    assert settler.copies == settler.dead == settler.visibility == []


async def test_work_left_goes_on_in_messages_of_their_own_then_the_packed_one_is_deleted() -> None:
    message, bodies = _packed_message(4)
    views, settler, lane = unpack(message, bodies), _Settler(), _Lane()
    transient = Outcome(Failure.transient, "executor 503", action="retry")
    rejected = Outcome(Failure.permanent, "rejected", action="failed")
    plans = [
        DONE,
        (Plan(Action.backoff, 7), transient),
        (Plan(Action.requeue, 4000), transient),  # a copy waits at most SQS's 15 minutes
        (Plan(Action.dead_letter), rejected),
    ]
    await _settle(views, plans, settler, lane)
    ids = [b.transaction_id for b in bodies]
    assert settler.copies == [(ids[1], 7), (ids[2], 900)]
    assert settler.dead == [(ids[3], "rejected")]
    assert lane.deleter.handles == ["handle-1"]
    assert settler.visibility == []


async def test_an_unexpected_error_goes_on_in_a_copy_like_a_back_off() -> None:
    # Its copy is a message of its own: SQS's redrive takes it to the DLQ after its own
    # receives, as it would have taken the transaction's own message.
    message, bodies = _packed_message(3)
    error = Outcome(Failure.error, "KeyError: 'x'", action="error")
    plans = [DONE, (Plan(Action.backoff, 30), error), (Plan(Action.backoff, 12), error)]
    views, settler, lane = unpack(message, bodies), _Settler(), _Lane()
    await _settle(views, plans, settler, lane)
    assert settler.copies == [(bodies[1].transaction_id, 30), (bodies[2].transaction_id, 12)]
    assert lane.deleter.handles == ["handle-1"]
    assert settler.dead == settler.visibility == []


async def test_a_copy_sqs_did_not_take_brings_the_packed_message_back() -> None:
    message, bodies = _packed_message(2)
    transient = Outcome(Failure.transient, "timeout", action="retry")
    views, settler, lane = unpack(message, bodies), _Settler(fail_copies=True), _Lane()
    await _settle(views, [DONE, (Plan(Action.backoff, 9), transient)], settler, lane)
    assert lane.deleter.handles == []
    assert settler.visibility == [("handle-1", 9)]


async def test_work_ended_without_a_plan_leaves_the_packed_message_to_come_back() -> None:
    message, bodies = _packed_message(3)
    views, settler, lane = unpack(message, bodies), _Settler(), _Lane()
    transient = Outcome(Failure.transient, "timeout", action="retry")
    await _settle(views[:1], [(Plan(Action.backoff, 5), transient)], settler, lane)
    # views[1]'s work is cut off (cancelled at shutdown, say): it is never settled.
    await _settle(views[2:], [DONE], settler, lane)
    assert lane.deleter.handles == settler.visibility == settler.copies == []
