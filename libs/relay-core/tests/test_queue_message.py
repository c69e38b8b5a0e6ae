from __future__ import annotations

import uuid

import pytest

from relay_core import jsonutil, tracing
from relay_core.queue import PoisonMessage, TransactionMessage
from relay_core.statuses import TxType


def test_message_round_trips_through_its_body() -> None:
    message = TransactionMessage.new(str(uuid.uuid4()), "gasless")
    assert TransactionMessage.parse(message.body()) == message


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
        assert TransactionMessage.parse(message.body()).transaction_id == transaction_id
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
