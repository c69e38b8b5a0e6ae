"""The SQS side of the outbox: one client, the queue URL resolved lazily (SQS may be down at
start-up; the API must still start and accept)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from relay_core.queue import TransactionMessage, send_batch


class WorkQueue:
    def __init__(self, sqs: Any, queue_name: str, timeout_s: float) -> None:
        self.sqs = self._sqs = sqs  # (public: the admin endpoints read depths with it)
        self._queue_name = queue_name
        self._timeout_s = timeout_s
        self._url: str | None = None

    async def url(self) -> str:
        if self._url is None:
            response = await asyncio.wait_for(
                self._sqs.get_queue_url(QueueName=self._queue_name), self._timeout_s
            )
            self._url = str(response["QueueUrl"])
        return self._url

    async def send(self, messages: Sequence[TransactionMessage]) -> set[str]:
        """Send in batches of 10, concurrently; return the transaction ids SQS accepted.

        Raises when nothing could be sent because of an error (SQS down); a partial failure
        returns what was sent, and the rest is left to the sweeper.
        """
        url = await self.url()
        chunks = [messages[start : start + 10] for start in range(0, len(messages), 10)]
        sends = [asyncio.wait_for(send_batch(self._sqs, url, c), self._timeout_s) for c in chunks]
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

    async def ping(self) -> None:
        url = await self.url()
        await asyncio.wait_for(
            self._sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"]),
            self._timeout_s,
        )
