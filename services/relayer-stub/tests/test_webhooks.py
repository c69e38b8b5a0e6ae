"""Webhooks exactly as upstream sends them, to a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import uuid
from datetime import datetime
from typing import Any

import pytest
from stub_testkit import Stub, WebhookReceiver, free_port

from relayer_stub.webhooks.schemas import WebhookConfig
from relayer_stub.webhooks.service import WebhookDispatcher

KEY = "webhook-signing-key-0123456789-0123456789"


def expected_signature(body: bytes, key: str = KEY) -> str:
    return base64.b64encode(hmac.new(key.encode(), body, hashlib.sha256).digest()).decode()


async def test_every_status_change_is_posted_signed_over_the_raw_body(
    stub_factory: Any, webhook_receiver: WebhookReceiver
) -> None:
    async with stub_factory(webhook_url=webhook_receiver.url, webhook_signing_key=KEY) as stub:
        created = await stub.send_ok()
        await stub.wait_for(created["id"], "confirmed")
        received = await webhook_receiver.wait_for_count(4)

    statuses = set()
    for delivery in received:
        assert delivery.headers["X-Signature"] == expected_signature(delivery.body)
        assert delivery.headers["Content-Type"] == "application/json"
        notification = json.loads(delivery.body)
        assert json.dumps(notification, separators=(",", ":")).encode() == delivery.body
        assert list(notification) == ["id", "event", "payload", "timestamp"]
        assert uuid.UUID(notification["id"])
        assert notification["event"] == "transaction_update"
        assert datetime.fromisoformat(notification["timestamp"]).tzinfo is not None
        payload = notification["payload"]
        assert payload["payload_type"] == "transaction"
        assert payload["id"] == created["id"]
        assert payload["value"] == "0xe8d4a51000"
        assert {"hash", "status", "from", "to", "nonce", "is_canceled"} <= set(payload)
        statuses.add(payload["status"])
    assert statuses == {"sent", "submitted", "mined", "confirmed"}
    assert len({json.loads(d.body)["id"] for d in received}) == 4


async def test_a_signature_made_with_another_key_does_not_match(
    stub_factory: Any, webhook_receiver: WebhookReceiver
) -> None:
    async with stub_factory(
        webhook_url=webhook_receiver.url, lifecycle={"paused": True}, webhook_signing_key=KEY
    ) as stub:
        created = await stub.send_ok()
        await stub.client.delete(f"{stub.tx_path}/{created['id']}", headers=stub.auth)
        (delivery,) = await webhook_receiver.wait_for_count(1)

    assert delivery.headers["X-Signature"] != expected_signature(delivery.body, KEY[::-1])
    assert delivery.headers["X-Signature"] == expected_signature(delivery.body)


async def test_failed_deliveries_are_retried_with_the_same_body_until_accepted(
    stub_factory: Any, webhook_receiver: WebhookReceiver
) -> None:
    webhook_receiver.script = [500, 404]
    async with stub_factory(
        webhook_url=webhook_receiver.url, webhook_signing_key=KEY, lifecycle={"paused": True}
    ) as stub:
        created = await stub.send_ok()
        await stub.client.delete(f"{stub.tx_path}/{created['id']}", headers=stub.auth)
        received = await webhook_receiver.wait_for_count(3)
        await asyncio.sleep(0.3)
        stats = (await stub.admin("GET", "webhook"))["stats"]

    assert len(webhook_receiver.received) == 3
    assert len({d.body for d in received}) == 1  # one notification, delivered three times
    assert json.loads(received[0].body)["payload"]["status"] == "canceled"
    assert stats["failed_attempts"] == 2
    assert stats["delivered"] == 1


async def test_delivery_gives_up_after_the_configured_retries(
    stub_factory: Any, webhook_receiver: WebhookReceiver
) -> None:
    webhook_receiver.script = [503] * 10
    async with stub_factory(
        webhook_url=webhook_receiver.url, webhook_retries=2, lifecycle={"paused": True}
    ) as stub:
        created = await stub.send_ok()
        await stub.client.delete(f"{stub.tx_path}/{created['id']}", headers=stub.auth)
        await webhook_receiver.wait_for_count(3)
        await asyncio.sleep(0.5)
        stats = (await stub.admin("GET", "webhook"))["stats"]

    assert len(webhook_receiver.received) == 3  # the first attempt and two retries
    assert stats["gave_up"] == 1


async def test_connection_errors_are_retried_like_non_2xx(stub_factory: Any) -> None:
    dead_end = f"http://127.0.0.1:{free_port()}/hooks"
    async with stub_factory(
        webhook_url=dead_end, webhook_retries=1, lifecycle={"paused": True}
    ) as stub:
        created = await stub.send_ok()
        await stub.client.delete(f"{stub.tx_path}/{created['id']}", headers=stub.auth)
        for _ in range(100):
            stats = (await stub.admin("GET", "webhook"))["stats"]
            if stats.get("gave_up"):
                break
            await asyncio.sleep(0.02)

    assert stats["failed_attempts"] == 2
    assert stats["gave_up"] == 1


async def test_without_a_signing_key_there_is_no_signature_header(
    stub_factory: Any, webhook_receiver: WebhookReceiver
) -> None:
    async with stub_factory(webhook_url=webhook_receiver.url, lifecycle={"paused": True}) as stub:
        created = await stub.send_ok()
        await stub.client.delete(f"{stub.tx_path}/{created['id']}", headers=stub.auth)
        (delivery,) = await webhook_receiver.wait_for_count(1)

    assert "X-Signature" not in delivery.headers


async def test_the_webhook_target_can_be_set_and_turned_off_at_runtime(
    stub: Stub, webhook_receiver: WebhookReceiver
) -> None:
    configured = await stub.admin(
        "PUT", "webhook", {"url": webhook_receiver.url, "signing_key": KEY}
    )
    assert configured["config"] == {"url": webhook_receiver.url, "signing_key_set": True}
    first = await stub.send_ok()
    await stub.wait_for(first["id"], "confirmed")
    await webhook_receiver.wait_for_count(4)

    await stub.admin("PUT", "webhook", {"url": None})
    second = await stub.send_ok()
    await stub.wait_for(second["id"], "confirmed")
    await asyncio.sleep(0.2)

    assert {json.loads(body)["payload"]["id"] for body in webhook_receiver.bodies()} == {
        first["id"]
    }


async def test_a_short_signing_key_is_refused(stub: Stub) -> None:
    response = await stub.client.put(
        "/__admin/webhook", json={"url": "http://127.0.0.1:9/x", "signing_key": "short"}
    )

    assert response.status_code == 422


@pytest.mark.parametrize(("attempt", "delay"), [(1, 2.0), (2, 4.0), (3, 8.0), (4, 8.0), (5, 8.0)])
def test_the_default_backoff_runs_from_two_to_eight_seconds_like_upstream(
    attempt: int, delay: float
) -> None:
    dispatcher = WebhookDispatcher(
        WebhookConfig(),
        retries=5,
        backoff_min_s=2.0,
        backoff_max_s=8.0,
        timeout_s=10,
        concurrency=1,
        queue_max=10,
    )

    assert dispatcher.backoff_s(attempt) == delay
