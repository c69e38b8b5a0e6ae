"""Idempotency-Key: replays return the original 202; a different body is a conflict."""

from __future__ import annotations

import asyncio

import httpx
from api_testkit import DEAD, count_rows

from relay_api.runtime import Runtime

DIRECT = "/api/v1/relay/direct"


async def test_replay_with_same_key_and_body_returns_the_original_202(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str
) -> None:
    headers = {"X-API-Key": api_key, "Idempotency-Key": "order-42"}
    first = await client.post(DIRECT, json={"to": DEAD, "value": "5"}, headers=headers)
    # Same body with the keys in another order is the same request.
    second = await client.post(DIRECT, json={"value": "5", "to": DEAD}, headers=headers)
    assert first.status_code == second.status_code == 202
    assert second.json() == first.json()
    assert second.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    assert await count_rows(runtime) == 1


async def test_same_key_with_a_different_body_is_a_conflict(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str
) -> None:
    headers = {"X-API-Key": api_key, "Idempotency-Key": "order-43"}
    assert (await client.post(DIRECT, json={"to": DEAD}, headers=headers)).status_code == 202
    conflict = await client.post(DIRECT, json={"to": DEAD, "value": "2"}, headers=headers)
    assert conflict.status_code == 409
    assert conflict.json()["error"] == "conflict"
    assert "Idempotency-Key" in conflict.json()["detail"]
    assert await count_rows(runtime) == 1


async def test_idempotency_keys_are_scoped_per_client(
    client: httpx.AsyncClient, runtime: Runtime, new_key: object
) -> None:
    key_a = await new_key("a")  # type: ignore[operator]
    key_b = await new_key("b")  # type: ignore[operator]
    a = await client.post(
        DIRECT, json={"to": DEAD}, headers={"X-API-Key": key_a, "Idempotency-Key": "same"}
    )
    b = await client.post(
        DIRECT,
        json={"to": DEAD, "value": "9"},
        headers={"X-API-Key": key_b, "Idempotency-Key": "same"},
    )
    assert a.status_code == b.status_code == 202
    assert a.json()["transactionId"] != b.json()["transactionId"]
    assert await count_rows(runtime) == 2


async def test_concurrent_identical_requests_create_exactly_one_row(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str
) -> None:
    headers = {"X-API-Key": api_key, "Idempotency-Key": "burst-1"}
    responses = await asyncio.gather(
        *(client.post(DIRECT, json={"to": DEAD, "value": "7"}, headers=headers) for _ in range(12))
    )
    assert {r.status_code for r in responses} == {202}
    assert len({r.json()["transactionId"] for r in responses}) == 1
    assert await count_rows(runtime) == 1
    await runtime.publisher.stop()
    # Only the one real insert produced a message.
    assert runtime.publisher.backlog() == 0
