"""The lanes' batched deletes (queue_consumer.lanes.Deleter): ten per call, several calls at
once, and nothing left undeleted at stop."""

from __future__ import annotations

import asyncio
from typing import Any

from queue_consumer.lanes import Deleter


class SlowSqs:
    """DeleteMessageBatch that takes ``seconds`` and records what it was given."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.calls: list[list[str]] = []
        self.at_once = self.most_at_once = 0

    async def delete_message_batch(self, *, QueueUrl: str, Entries: list[Any]) -> Any:
        self.at_once += 1
        self.most_at_once = max(self.most_at_once, self.at_once)
        try:
            await asyncio.sleep(self.seconds)
        finally:
            self.at_once -= 1
        self.calls.append([entry["ReceiptHandle"] for entry in Entries])
        return {"Successful": [{"Id": entry["Id"]} for entry in Entries]}


async def test_deletes_go_ten_at_a_time_several_calls_at_once_and_all_land_by_stop() -> None:
    sqs = SlowSqs(0.05)
    deleter = Deleter(sqs, "q", in_flight=4)
    deleter.start()
    handles = [f"h{i}" for i in range(80)]
    for handle in handles:
        deleter.add(handle)
    await deleter.stop()
    assert sorted(h for call in sqs.calls for h in call) == sorted(handles)
    assert all(len(call) <= 10 for call in sqs.calls)
    assert len(sqs.calls) == 8
    # One call at a time, each waiting for the one before, capped a consumer near 1,100
    # deletes a second here; now several run together.
    assert sqs.most_at_once == 4
