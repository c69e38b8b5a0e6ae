"""``transaction_update`` webhooks, as upstream sends them.

Body: compact JSON ``{id, event, payload: {payload_type: "transaction", ...tx}, timestamp}``.
Header ``X-Signature``: base64 (standard alphabet) of HMAC-SHA256 over the exact body bytes,
keyed with the signing key; sent only when a key is configured. A non-2xx answer or a
connection error is retried ``retries`` times with exponential backoff between ``backoff_min_s``
and ``backoff_max_s`` (upstream: 5 retries, 2-8 s). Delivery runs on background workers: the
API only enqueues.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from relayer_stub.transactions.models import new_uuid4, now_rfc3339
from relayer_stub.webhooks.schemas import WebhookConfig

log = logging.getLogger(__name__)


def sign(body: bytes, key: str) -> str:
    return base64.b64encode(hmac.new(key.encode(), body, hashlib.sha256).digest()).decode()


def transaction_update_body(tx_response: dict[str, Any]) -> bytes:
    return orjson.dumps(
        {
            "id": new_uuid4(),
            "event": "transaction_update",
            "payload": {"payload_type": "transaction", **tx_response},
            "timestamp": now_rfc3339(),
        }
    )


@dataclass(slots=True)
class _Delivery:
    url: str
    key: str | None
    body: bytes
    tx_id: str
    attempt: int = 0


class WebhookDispatcher:
    def __init__(
        self,
        config: WebhookConfig,
        *,
        retries: int,
        backoff_min_s: float,
        backoff_max_s: float,
        timeout_s: float,
        concurrency: int,
        queue_max: int,
    ) -> None:
        self._config = config
        self.retries = retries
        self.backoff_min_s = backoff_min_s
        self.backoff_max_s = backoff_max_s
        self.timeout_s = timeout_s
        self.concurrency = concurrency
        self._queue: asyncio.Queue[_Delivery] = asyncio.Queue(maxsize=queue_max)
        self._client: httpx.AsyncClient | None = None
        self._workers: list[asyncio.Task[None]] = []
        self._retry_timers: set[asyncio.TimerHandle] = set()
        self._in_flight = 0
        self.stats: Counter[str] = Counter()

    @property
    def config(self) -> WebhookConfig:
        return self._config

    @property
    def enabled(self) -> bool:
        return self._config.url is not None

    def configure(self, config: WebhookConfig) -> None:
        """New events go to the new target; deliveries already queued keep theirs."""
        self._config = config

    def backoff_s(self, attempt: int) -> float:
        """Delay before retry number ``attempt`` (1-based): min, 2*min, 4*min... capped."""
        return float(min(self.backoff_max_s, self.backoff_min_s * 2 ** (attempt - 1)))

    def transaction_update(self, tx_response: dict[str, Any]) -> None:
        url = self._config.url
        if url is None:
            return
        key = self._config.signing_key
        delivery = _Delivery(
            url=url,
            key=key.get_secret_value() if key is not None else None,
            body=transaction_update_body(tx_response),
            tx_id=str(tx_response["id"]),
        )
        self._enqueue(delivery)

    def _enqueue(self, delivery: _Delivery) -> None:
        try:
            self._queue.put_nowait(delivery)
        except asyncio.QueueFull:
            self.stats["dropped"] += 1
            if self.stats["dropped"] % 1000 == 1:
                log.warning("stub.webhook.queue_full", extra={"dropped": self.stats["dropped"]})

    @property
    def pending(self) -> int:
        return self._queue.qsize() + len(self._retry_timers) + self._in_flight

    def clear(self) -> None:
        for timer in self._retry_timers:
            timer.cancel()
        self._retry_timers.clear()
        while not self._queue.empty():
            self._queue.get_nowait()
        self.stats = Counter()

    async def start(self) -> None:
        self._client = httpx.AsyncClient(
            timeout=self.timeout_s,
            limits=httpx.Limits(max_connections=self.concurrency),
            follow_redirects=False,
        )
        self._workers = [
            asyncio.create_task(self._work(), name=f"webhook-{n}") for n in range(self.concurrency)
        ]

    async def stop(self) -> None:
        left = self.pending
        if left:
            log.info("stub.webhook.dropped_at_shutdown", extra={"pending": left})
        for timer in self._retry_timers:
            timer.cancel()
        self._retry_timers.clear()
        for worker in self._workers:
            worker.cancel()
        for worker in self._workers:
            with contextlib.suppress(asyncio.CancelledError):
                await worker
        self._workers = []
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _work(self) -> None:
        while True:
            delivery = await self._queue.get()
            self._in_flight += 1
            try:
                await self._attempt(delivery)
            finally:
                self._in_flight -= 1

    async def _attempt(self, delivery: _Delivery) -> None:
        assert self._client is not None
        headers = {"Content-Type": "application/json"}
        if delivery.key is not None:
            headers["X-Signature"] = sign(delivery.body, delivery.key)
        error: str
        try:
            response = await self._client.post(delivery.url, content=delivery.body, headers=headers)
        except httpx.HTTPError as exc:
            error = type(exc).__name__
        else:
            if 200 <= response.status_code < 300:
                self.stats["delivered"] += 1
                return
            error = f"HTTP {response.status_code}"
        self.stats["failed_attempts"] += 1
        delivery.attempt += 1
        if delivery.attempt > self.retries:
            self.stats["gave_up"] += 1
            log.warning(
                "stub.webhook.gave_up",
                extra={
                    "transaction_id": delivery.tx_id,
                    "error": error,
                    "attempts": delivery.attempt,
                },
            )
            return
        delay = self.backoff_s(delivery.attempt)
        log.info(
            "stub.webhook.retry",
            extra={"transaction_id": delivery.tx_id, "error": error, "in_s": delay},
        )
        loop = asyncio.get_running_loop()
        timer: asyncio.TimerHandle | None = None

        def requeue() -> None:
            if timer is not None:
                self._retry_timers.discard(timer)
            self._enqueue(delivery)

        timer = loop.call_later(delay, requeue)
        self._retry_timers.add(timer)
