from __future__ import annotations

import uuid

import pytest

from relay_core import jsonutil, tracing
from relay_core.queue import (
    MOST_PER_MESSAGE,
    PoisonMessage,
    TransactionMessage,
    pack,
    packed_entry,
)
from relay_core.statuses import TxType


def test_message_round_trips_through_its_body() -> None:
    message = TransactionMessage.new(str(uuid.uuid4()), "gasless")
    assert TransactionMessage.parse(message.body()) == [message]


def test_a_batchs_messages_are_what_new_makes_each_with_its_own_id() -> None:
    trace = tracing.Trace(request_id="req-1", trace_id="ab" * 16, span_id="cd" * 8, sampled=True)
    ids = [str(uuid.uuid4()) for _ in range(3)]
    lanes = ["fast", "normal", "fast"]
    made = TransactionMessage.many(
        ids, TxType.direct, trace, lanes, timestamp="2026-11-28T10:00:00Z"
    )
    for message, transaction_id, lane in zip(made, ids, lanes, strict=True):
        one = TransactionMessage.new(
            transaction_id, "direct", trace, lane, timestamp="2026-11-28T10:00:00Z"
        )
        assert message.attributes() == one.attributes()
        assert (message.transaction_id, message.lane, message.type) == (
            transaction_id,
            lane,
            "direct",
        )
        assert [m.transaction_id for m in TransactionMessage.parse(message.body())] == [
            transaction_id
        ]
        uuid.UUID(message.message_id)
    assert len({message.message_id for message in made}) == 3
    with pytest.raises(ValueError, match="shorter"):  # a lane for each transaction, no fewer
        TransactionMessage.many(ids, TxType.direct, None, ["normal"], timestamp="t")
    assert TransactionMessage.many([], TxType.direct, None, [], timestamp="t") == []


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        "[1, 2]",
        jsonutil.dumps(
            {
                "schemaVersion": 2,
                "transactionId": "8a1e5c3e-0b7d-4c2a-9f61-3d2b8e0a4c17",
                "type": "direct",
            }
        ),
        jsonutil.dumps({"schemaVersion": 1, "type": "direct", "messageId": "m", "timestamp": "t"}),
        *(
            jsonutil.dumps(
                {
                    "schemaVersion": 2,
                    "transactionIds": named,
                    "type": "direct",
                    "messageId": "m",
                    "timestamp": "t",
                }
            )
            for named in (
                [],  # none
                [str(uuid.uuid4()) for _ in range(MOST_PER_MESSAGE + 1)],  # too many
                ["8a1e5c3e-0b7d-4c2a-9f61-3d2b8e0a4c17"] * 2,  # one twice
                [str(uuid.uuid4()), "nope"],
                "8a1e5c3e-0b7d-4c2a-9f61-3d2b8e0a4c17",  # not a list
            )
        ),
        jsonutil.dumps(
            {
                "schemaVersion": 1,
                "transactionId": "nope",
                "type": "direct",
                "messageId": "m",
                "timestamp": "t",
            }
        ),
        jsonutil.dumps(
            {
                "schemaVersion": 1,
                "transactionId": str(uuid.uuid4()),
                "type": "swap",
                "messageId": "m",
                "timestamp": "t",
            }
        ),
    ],
)
def test_unparseable_or_unknown_schema_messages_are_poison(body: str) -> None:
    with pytest.raises(PoisonMessage):
        TransactionMessage.parse(body)


TRACE = tracing.Trace(request_id="req-1", trace_id="ab" * 16, span_id="cd" * 8, sampled=True)


def _batch(count: int, trace: tracing.Trace | None = TRACE, at: str = "2026-11-28T10:00:00.000Z"):
    ids = [str(uuid.uuid4()) for _ in range(count)]
    return TransactionMessage.many(ids, TxType.direct, trace, ["normal"] * count, timestamp=at)


def test_a_requests_transactions_are_packed_ten_to_a_message_in_order() -> None:
    batch = _batch(25)
    packed = pack(batch)
    assert [len(group) for group in packed] == [10, 10, 5]
    assert [m for group in packed for m in group] == batch


def test_only_one_requests_transactions_share_a_message() -> None:
    other = tracing.Trace(request_id="req-2", trace_id="ef" * 16, span_id="cd" * 8, sampled=True)
    first, second = _batch(3), _batch(2, other)
    later = _batch(2, at="2026-11-28T10:00:01.000Z")  # same trace, another moment
    untraced = _batch(3, None)  # the sweeper's: each alone
    packed = pack([*first, *second, *later, *untraced])
    assert [len(group) for group in packed] == [3, 2, 2, 1, 1, 1]
    gasless = TransactionMessage.new(str(uuid.uuid4()), TxType.gasless, TRACE)
    gasless = TransactionMessage(  # the batch's trace and moment, another type
        gasless.transaction_id,
        TxType.gasless,
        gasless.message_id,
        first[0].timestamp,
        first[0].request_id,
        first[0].traceparent,
    )
    assert [len(group) for group in pack([*first, gasless])] == [3, 1]


def test_a_packed_message_names_its_transactions_and_parses_back() -> None:
    batch = _batch(4)
    entry = packed_entry(3, batch)
    assert entry["Id"] == "3"
    body = jsonutil.loads(entry["MessageBody"])
    assert body["schemaVersion"] == 2
    assert body["transactionIds"] == [m.transaction_id for m in batch]
    attributes = entry["MessageAttributes"]
    assert "transactionId" not in attributes
    assert attributes["schemaVersion"]["StringValue"] == "2"
    assert attributes["requestId"]["StringValue"] == "req-1"
    assert attributes["traceparent"] == batch[0].attributes()["traceparent"]
    parsed = TransactionMessage.parse(entry["MessageBody"])
    assert [m.transaction_id for m in parsed] == [m.transaction_id for m in batch]
    assert {(m.type, m.timestamp, m.message_id) for m in parsed} == {
        (TxType.direct, batch[0].timestamp, batch[0].message_id)
    }
    # One alone is sent as its own message, as before.
    alone = packed_entry(0, batch[:1])
    assert alone["MessageBody"] == batch[0].body()
    assert alone["MessageAttributes"] == batch[0].attributes()
