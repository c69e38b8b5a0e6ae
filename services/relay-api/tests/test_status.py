"""Status reads: Redis first, then MySQL (which backfills Redis); Redis down is not an error."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis
from api_testkit import DEAD
from statements import recorded

from relay_api.app import create_app
from relay_api.auth.service import Authenticator
from relay_api.runtime import Runtime
from relay_core.db.models import Transaction
from relay_core.db.transitions import transition
from relay_devstack.localsqs import free_port


async def _submit(client: httpx.AsyncClient, api_key: str) -> str:
    response = await client.post(
        "/api/v1/relay/direct", json={"to": DEAD}, headers={"X-API-Key": api_key}
    )
    assert response.status_code == 202
    return str(response.json()["transactionId"])


async def test_pending_transaction_is_200_pending_never_404(
    client: httpx.AsyncClient, api_key: str
) -> None:
    tx_id = await _submit(client, api_key)
    response = await client.get(f"/api/v1/relay/status/{tx_id}", headers={"X-API-Key": api_key})
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "pending"
    assert body["transactionId"] == tx_id
    assert body["type"] == "direct"
    assert body["hash"] is None
    assert body["confirmedAt"] is None
    assert "clientId" not in body


async def test_what_a_mined_transaction_cost_is_in_its_status_and_in_the_list(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str
) -> None:
    tx_id = await _submit(client, api_key)
    headers = {"X-API-Key": api_key}
    pending = (await client.get(f"/api/v1/relay/status/{tx_id}", headers=headers)).json()
    cost_fields = ("blockNumber", "gasUsed", "effectiveGasPrice", "feeWei")
    assert [pending[name] for name in cost_fields] == [None] * 4
    async with runtime.sessions() as session, session.begin():
        tx = await session.get(Transaction, tx_id)
        assert tx is not None
        # As the consumer writes it once the chain has its receipt, Redis written through.
        assert await transition(
            session,
            tx,
            "confirmed",
            source="test",
            hash="0x" + "ab" * 32,
            block_number=16,
            gas_used=21_000,
            effective_gas_price="1500000000",
            fee_wei="31500000000000",
        )
    assert runtime.cache is not None
    assert await runtime.cache.put_row_quietly(tx)
    status = (await client.get(f"/api/v1/relay/status/{tx_id}", headers=headers)).json()
    expected = [16, 21_000, "1500000000", "31500000000000"]
    assert [status[name] for name in cost_fields] == expected
    (listed,) = (await client.get("/api/v1/relay/transactions", headers=headers)).json()["items"]
    assert [listed[name] for name in cost_fields] == expected


async def test_unknown_id_is_404_and_a_malformed_id_is_422(
    client: httpx.AsyncClient, api_key: str
) -> None:
    unknown = await client.get(
        f"/api/v1/relay/status/{uuid.uuid4()}", headers={"X-API-Key": api_key}
    )
    assert unknown.status_code == 404
    assert unknown.json()["error"] == "not_found"
    malformed = await client.get("/api/v1/relay/status/not-a-uuid", headers={"X-API-Key": api_key})
    assert malformed.status_code == 422
    assert "transactionId" in malformed.json()["detail"]


async def test_second_read_is_served_from_redis(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str
) -> None:
    tx_id = await _submit(client, api_key)
    path = f"/api/v1/relay/status/{tx_id}"
    first = await client.get(path, headers={"X-API-Key": api_key})
    second = await client.get(path, headers={"X-API-Key": api_key})
    assert first.headers["x-cache"] == "miss"
    assert second.headers["x-cache"] == "hit"
    assert first.json() == second.json()
    assert runtime.cache is not None
    cached = await runtime.cache.get(tx_id)
    assert cached is not None
    assert cached[0] == 1


@pytest.fixture
def private_redis() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A Redis server of this test's own, so the test can stop it."""
    port = free_port()
    process = subprocess.Popen(
        [
            "redis-server",
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
    )
    client = redis.Redis(host="127.0.0.1", port=port)
    for _ in range(100):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    try:
        yield f"redis://127.0.0.1:{port}/0", process
    finally:
        process.kill()
        process.wait()


async def test_redis_stopped_status_is_still_served_from_mysql(
    api_settings: Any, queues: tuple[str, str], api_key: str, private_redis: Any
) -> None:
    redis_url, redis_process = private_redis
    app = create_app(api_settings.model_copy(update={"redis_url": redis_url}))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://relay.test") as client:
            tx_id = await _submit(client, api_key)
            path = f"/api/v1/relay/status/{tx_id}"
            headers = {"X-API-Key": api_key}
            assert (await client.get(path, headers=headers)).headers["x-cache"] == "miss"
            assert (await client.get(path, headers=headers)).headers["x-cache"] == "hit"

            redis_process.kill()
            redis_process.wait()
            for _ in range(3):
                response = await client.get(path, headers=headers)
                assert response.status_code == 200
                assert response.headers["x-cache"] == "miss"
                assert response.json()["status"] == "pending"
            # Accepting does not depend on Redis either.
            assert (
                await client.post("/api/v1/relay/direct", json={"to": DEAD}, headers=headers)
            ).status_code == 202
            ready = await client.get("/ready")
            assert ready.status_code == 503
            assert ready.json()["components"]["redis"].startswith("down")
            assert app.state.runtime.cache.errors >= 1


async def test_without_redis_configured_status_comes_from_mysql(
    api_settings: Any, queues: tuple[str, str], api_key: str
) -> None:
    app = create_app(api_settings.model_copy(update={"redis_url": None}))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://relay.test") as client:
            tx_id = await _submit(client, api_key)
            path = f"/api/v1/relay/status/{tx_id}"
            for _ in range(2):
                response = await client.get(path, headers={"X-API-Key": api_key})
                assert response.status_code == 200
                assert response.headers["x-cache"] == "miss"
            ready = await client.get("/ready")
            assert ready.status_code == 200
            assert set(ready.json()["components"]) == {"database", "sqs"}


async def test_a_status_answered_from_redis_does_not_touch_the_database(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str
) -> None:
    runtime.authenticator = Authenticator(runtime.sessions, ttl_s=60)  # keys cached, as deployed
    tx_id = await _submit(client, api_key)
    path = f"/api/v1/relay/status/{tx_id}"
    first = await client.get(path, headers={"X-API-Key": api_key})  # backfills Redis
    assert first.headers["x-cache"] == "miss"
    with recorded(runtime.engine) as seen:
        hit = await client.get(path, headers={"X-API-Key": api_key})
    assert hit.headers["x-cache"] == "hit"
    assert seen == []
