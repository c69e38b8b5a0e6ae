"""Registering a callback URL, and which URL a transaction's notifications go to."""

from __future__ import annotations

import httpx
from api_testkit import DEAD

from relay_api.runtime import Runtime
from relay_core.db.models import Transaction

PATH = "/api/v1/clients/me/callback"


async def _callback_of(runtime: Runtime, tx_id: str) -> str | None:
    async with runtime.sessions() as session:
        tx = await session.get(Transaction, tx_id)
        assert tx is not None
        return tx.callback_url


async def test_client_callback_is_registered_with_a_secret_shown_once_and_used_by_default(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str
) -> None:
    headers = {"X-API-Key": api_key}
    first = await client.put(PATH, json={"url": "https://client.example/hooks"}, headers=headers)
    assert first.status_code == 200
    assert first.json()["secret"].startswith("whsec_")
    again = await client.put(PATH, json={"url": "https://client.example/v2"}, headers=headers)
    assert again.json() == {"url": "https://client.example/v2", "secret": None}
    rotated = await client.put(
        PATH, json={"url": "https://client.example/v2", "rotateSecret": True}, headers=headers
    )
    assert rotated.json()["secret"] not in (None, first.json()["secret"])

    default = await client.post("/api/v1/relay/direct", json={"to": DEAD}, headers=headers)
    override = await client.post(
        "/api/v1/relay/direct",
        json={"to": DEAD, "callbackUrl": "https://other.example/x"},
        headers=headers,
    )
    assert (
        await _callback_of(runtime, default.json()["transactionId"]) == "https://client.example/v2"
    )
    assert (
        await _callback_of(runtime, override.json()["transactionId"]) == "https://other.example/x"
    )

    await client.put(PATH, json={"url": None}, headers=headers)
    none = await client.post("/api/v1/relay/direct", json={"to": DEAD}, headers=headers)
    assert await _callback_of(runtime, none.json()["transactionId"]) is None


async def test_callback_urls_must_be_absolute_http(client: httpx.AsyncClient, api_key: str) -> None:
    headers = {"X-API-Key": api_key}
    for bad in ["ftp://x/y", "not a url", "/relative", "http://"]:
        response = await client.put(PATH, json={"url": bad}, headers=headers)
        assert response.status_code == 422, bad
        assert "url" in response.json()["detail"]
    response = await client.post(
        "/api/v1/relay/direct", json={"to": DEAD, "callbackUrl": "javascript:1"}, headers=headers
    )
    assert response.status_code == 422
    assert "callbackUrl" in response.json()["detail"]
