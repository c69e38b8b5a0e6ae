"""The webhook writer's wait for company (relay_api.webhooks.batch), its batches recorded
rather than written: no database."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from relay_api.webhooks.batch import Delivery, WebhookWriter
from relay_core.statuses import TxStatus
from relay_core.tracking import UpstreamView


def _writer(linger_s: float) -> tuple[WebhookWriter, list[list[str]]]:
    """One writer, batches of at most three, each batch's webhook ids recorded and
    answered ``applied``."""
    writer = WebhookWriter(None, None, writers=1, max_batch=3, linger_s=linger_s)  # type: ignore[arg-type]
    batches: list[list[str]] = []

    async def settle(batch: list[Delivery]) -> None:
        batches.append([d.webhook_id for d in batch])
        for delivery in batch:
            delivery.future.set_result("applied")

    writer._settle = settle  # type: ignore[method-assign]
    return writer, batches


def _delivery(webhook_id: str) -> Delivery:
    view = UpstreamView(status=TxStatus.submitted, hash=None, confirmed_at=None, reason=None)
    return Delivery(webhook_id, "executor-1", view, asyncio.get_running_loop().create_future())


async def _applied(writer: WebhookWriter, webhook_ids: list[str]) -> list[Any]:
    deliveries = [_delivery(w) for w in webhook_ids]
    for delivery in deliveries:
        writer._queue_of(delivery).put_nowait(delivery)
    return await asyncio.gather(*(d.future for d in deliveries))


async def test_a_delivery_waits_for_the_next_one() -> None:
    writer, batches = _writer(linger_s=0.5)
    writer.start()
    try:
        first = asyncio.ensure_future(_applied(writer, ["a"]))
        await asyncio.sleep(0.05)
        await _applied(writer, ["b"])
        await first
    finally:
        await writer.stop()
    assert batches == [["a", "b"]]


async def test_a_full_batch_queued_does_not_wait() -> None:
    writer, batches = _writer(linger_s=5.0)
    deliveries = _applied(writer, ["a", "b", "c"])
    began = time.monotonic()
    writer.start()
    try:
        await asyncio.wait_for(deliveries, 2.0)
    finally:
        await writer.stop()
    assert batches == [["a", "b", "c"]]
    assert time.monotonic() - began < 2.0
