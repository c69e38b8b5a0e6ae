from __future__ import annotations

import uuid

import pytest

from relay_core import jsonutil
from relay_core.queue import PoisonMessage, TransactionMessage


def test_message_round_trips_through_its_body() -> None:
    message = TransactionMessage.new(str(uuid.uuid4()), "gasless")
    assert TransactionMessage.parse(message.body()) == message


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
