"""The accept path: durable row, then the SQS message in the contract's shape."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import httpx
from api_testkit import DEAD, receive_all, signed_gasless
from sqlalchemy import select, text, update
from statements import recorded

from relay_api.auth.service import Authenticator
from relay_api.runtime import Runtime
from relay_core import jsonutil
from relay_core.db.models import Transaction


async def _row(runtime: Runtime, transaction_id: str) -> Transaction:
    async with runtime.sessions() as session:
        row = await session.get(Transaction, transaction_id)
        assert row is not None
        return row


async def test_accepted_direct_request_is_durable_and_its_message_matches_the_contract(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str, sqs: Any, queues: tuple[str, str]
) -> None:
    response = await client.post(
        "/api/v1/relay/direct",
        json={"to": DEAD.lower(), "data": "0xABCD", "value": "1000000000000000000000"},
        headers={"X-API-Key": api_key},
    )
    assert response.status_code == 202
    tx_id = response.json()["transactionId"]
    await runtime.publisher.stop()  # flushes what is buffered

    row = await _row(runtime, tx_id)
    assert row.status == "pending"
    assert row.type == "direct"
    # Normalised on the way in: checksummed address, lower-case hex, wei as an exact string.
    assert row.request["to"] == DEAD
    assert row.request["data"] == "0xabcd"
    assert row.request["value"] == "1000000000000000000000"
    assert row.enqueued_at is not None

    messages = await receive_all(sqs, queues[0])
    assert len(messages) == 1
    body = jsonutil.loads(messages[0]["Body"])
    assert set(body) == {"schemaVersion", "messageId", "transactionId", "type", "timestamp"}
    assert body["schemaVersion"] == 1
    assert body["transactionId"] == tx_id
    assert body["type"] == "direct"
    uuid.UUID(body["messageId"])
    assert datetime.fromisoformat(body["timestamp"].replace("Z", "+00:00")).tzinfo is not None
    attributes = messages[0]["MessageAttributes"]
    assert attributes["transactionId"]["StringValue"] == tx_id
    assert attributes["type"]["StringValue"] == "direct"
    assert attributes["schemaVersion"]["StringValue"] == "1"


async def test_queue_has_redrive_to_the_dlq_with_the_configured_limits(
    sqs: Any, queues: tuple[str, str], runtime: Runtime
) -> None:
    queue_url, dlq_url = queues
    attributes = (await sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"]))[
        "Attributes"
    ]
    dlq_arn = (await sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"]))[
        "Attributes"
    ]["QueueArn"]
    redrive = jsonutil.loads(attributes["RedrivePolicy"])
    assert redrive["deadLetterTargetArn"] == dlq_arn
    assert int(redrive["maxReceiveCount"]) == runtime.settings.queue_max_receive_count == 40
    assert attributes["VisibilityTimeout"] == "30"
    assert attributes["MessageRetentionPeriod"] == str(4 * 24 * 3600)
    assert dlq_url.endswith(runtime.settings.dlq_name)


async def test_gasless_request_is_stored_with_forwarder_domain_and_enqueued_as_gasless(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str, sqs: Any, queues: tuple[str, str]
) -> None:
    body = signed_gasless(runtime.settings, nonce=7, data="0xa9059cbb")
    response = await client.post("/api/v1/relay/gasless", json=body, headers={"X-API-Key": api_key})
    assert response.status_code == 202, response.text
    await runtime.publisher.stop()
    row = await _row(runtime, response.json()["transactionId"])
    assert row.type == "gasless"
    assert row.request["forwarder"] == runtime.settings.forwarder_address
    assert row.request["chainId"] == runtime.settings.chain_id
    assert row.request["signature"] == body["signature"]
    assert row.inflight_key == f"{body['request']['from'].lower()}:7"
    assert row.valid_until is not None
    messages = await receive_all(sqs, queues[0])
    assert [jsonutil.loads(m["Body"])["type"] for m in messages] == ["gasless"]


async def test_gasless_nonce_in_flight_is_refused_until_the_first_one_ends(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str
) -> None:
    from eth_account import Account

    sender = Account.create()
    headers = {"X-API-Key": api_key}
    first = signed_gasless(runtime.settings, account=sender, nonce=1)
    again = signed_gasless(runtime.settings, account=sender, nonce=1, data="0x01")
    response = await client.post("/api/v1/relay/gasless", json=first, headers=headers)
    assert response.status_code == 202
    conflict = await client.post("/api/v1/relay/gasless", json=again, headers=headers)
    assert conflict.status_code == 409
    assert "request.nonce" in conflict.json()["detail"]
    # Another nonce of the same sender is independent.
    other = signed_gasless(runtime.settings, account=sender, nonce=2)
    assert (
        await client.post("/api/v1/relay/gasless", json=other, headers=headers)
    ).status_code == 202
    # When the first one ends (the consumer clears the key), the nonce may be used again.
    async with runtime.sessions() as session, session.begin():
        await session.execute(
            update(Transaction)
            .where(Transaction.id == response.json()["transactionId"])
            .values(status="failed", inflight_key=None)
        )
    assert (
        await client.post("/api/v1/relay/gasless", json=again, headers=headers)
    ).status_code == 202


async def test_database_unreachable_answers_503_and_sends_nothing(
    api_settings: Any, queues: tuple[str, str], sqs: Any, api_key: str
) -> None:
    from relay_api.app import create_app

    down = api_settings.model_copy(
        update={"database_url": "mysql://root@127.0.0.1:1/nowhere", "database_connect_timeout_s": 1}
    )
    app = create_app(down)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://relay.test") as client:
            response = await client.post(
                "/api/v1/relay/direct", json={"to": DEAD}, headers={"X-API-Key": api_key}
            )
            assert response.status_code == 503
            assert response.json()["error"] == "service_unavailable"
            assert "root" not in response.text
            assert "127.0.0.1" not in response.text
            status = await client.get(
                f"/api/v1/relay/status/{uuid.uuid4()}", headers={"X-API-Key": api_key}
            )
            assert status.status_code == 503
        await app.state.runtime.publisher.stop()
    received = await sqs.receive_message(QueueUrl=queues[0], WaitTimeSeconds=0)
    assert received.get("Messages", []) == []


async def test_insert_failure_answers_503_not_202_and_publishes_nothing(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str
) -> None:
    """202 only after commit: make the write fail and the client must not hear "accepted"."""
    async with runtime.sessions() as session, session.begin():
        await session.execute(text("RENAME TABLE transactions TO transactions_gone"))
    try:
        response = await client.post(
            "/api/v1/relay/direct", json={"to": DEAD}, headers={"X-API-Key": api_key}
        )
        assert response.status_code == 503
        assert set(response.json()) == {"error", "detail"}
        assert "transactions" not in response.text  # no SQL or schema details leak
        assert runtime.publisher.backlog() == 0
    finally:
        async with runtime.sessions() as session, session.begin():
            await session.execute(text("RENAME TABLE transactions_gone TO transactions"))
    async with runtime.sessions() as session:
        assert (await session.execute(select(Transaction))).first() is None


async def test_an_accepted_request_is_one_insert_committed_by_itself(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str
) -> None:
    runtime.authenticator = Authenticator(runtime.sessions, ttl_s=60)  # keys cached, as deployed
    await runtime.authenticator.authenticate(api_key)
    await runtime.publisher.stop()  # its send and UPDATE run after the response: not counted
    with recorded(runtime.engine) as seen:
        response = await client.post(
            "/api/v1/relay/direct", json={"to": DEAD}, headers={"X-API-Key": api_key}
        )
    assert response.status_code == 202
    # One round trip on MySQL: the INSERT, committed by itself (relay_wire.direct)
    assert seen == ["INSERT INTO transactions"]
