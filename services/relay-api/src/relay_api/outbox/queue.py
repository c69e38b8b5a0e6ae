"""The SQS side of the outbox: one client, each lane's queue URL resolved lazily (SQS may be
down at start-up; the API must still start and accept)."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from relay_core.queue import TransactionMessage, pack, send_packed


class WorkQueue:
    def __init__(
        self, sqs: Any, queue_names: Mapping[str, str], timeout_s: float, *, packing: bool = True
    ) -> None:
        """``packing``: a request's transactions ten to a message (relay_core.queue.pack);
        otherwise each alone, for consumers older than the release that reads packed ones."""
        self.sqs = self._sqs = sqs  # (public: the admin endpoints read depths with it)
        self._names = dict(queue_names)  # lane -> queue name
        self._timeout_s = timeout_s
        self._packing = packing
        self._urls: dict[str, str] = {}

    async def url(self, lane: str = "normal") -> str:
        found = self._urls.get(lane)
        if found is None:
            response = await asyncio.wait_for(
                self._sqs.get_queue_url(QueueName=self._names[lane]), self._timeout_s
            )
            found = self._urls[lane] = str(response["QueueUrl"])
        return found

    async def send(self, messages: Sequence[TransactionMessage]) -> set[str]:
        """Send to each message's lane, a request's transactions packed up to ten to a message
        (relay_core.queue.pack: a batch of 100 is ten messages), ten messages a call, the
        calls concurrently; return the transaction ids SQS accepted.

        Raises when nothing could be sent because of an error (SQS down); a partial failure
        returns what was sent, and the rest is left to the sweeper.
        """
        by_lane: dict[str, list[TransactionMessage]] = defaultdict(list)
        for message in messages:
            by_lane[message.lane if message.lane in self._names else "normal"].append(message)
        sends = []
        for lane, some in by_lane.items():
            packed = pack(some) if self._packing else [[message] for message in some]
            sends += [self._send_chunk(lane, packed[i : i + 10]) for i in range(0, len(packed), 10)]
        results = await asyncio.gather(*sends, return_exceptions=True)
        sent: set[str] = set()
        errors: list[BaseException] = []
        for result in results:
            if isinstance(result, BaseException):
                errors.append(result)
            else:
                sent |= result
        if errors and not sent:
            raise errors[0]
        return sent

    async def _send_chunk(
        self, lane: str, chunk: Sequence[Sequence[TransactionMessage]]
    ) -> set[str]:
        # A lane whose queue cannot be found fails alone; the other lane's sends go on.
        url = await self.url(lane)
        async with asyncio.timeout(self._timeout_s):  # no task of its own, as wait_for makes
            return await send_packed(self._sqs, url, chunk)

    async def ping(self) -> None:
        url = await self.url()
        await asyncio.wait_for(
            self._sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"]),
            self._timeout_s,
        )
