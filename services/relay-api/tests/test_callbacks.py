"""Registering a callback URL, and which URL a transaction's notifications go to."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from api_testkit import DEAD, count_rows

from relay_api.runtime import Runtime
from relay_api.settings import ApiSettings
from relay_core import apikeys
from relay_core.db.models import Transaction
from relay_core.netguard import RefusedDestination

PATH = "/api/v1/clients/me/callback"


async def _callback_of(runtime: Runtime, tx_id: str) -> str | None:
    async with runtime.sessions() as session:
        tx = await session.get(Transaction, tx_id)
        assert tx is not None
        return tx.callback_url


async def test_client_callback_is_registered_and_used_by_default_and_its_secret_rotates(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str
) -> None:
    headers = {"X-API-Key": api_key}
    # The secret was made with the client (`relay keys create` shows it): not shown again.
    first = await client.put(PATH, json={"url": "https://client.example/hooks"}, headers=headers)
    assert first.json() == {"url": "https://client.example/hooks", "secret": None}
    again = await client.put(PATH, json={"url": "https://client.example/v2"}, headers=headers)
    assert again.json() == {"url": "https://client.example/v2", "secret": None}
    rotated = await client.put(
        PATH, json={"url": "https://client.example/v2", "rotateSecret": True}, headers=headers
    )
    secret = rotated.json()["secret"]
    assert secret.startswith("whsec_")
    assert len(apikeys.callback_secret_bytes(secret)) == 32

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


INSIDE = [
    "http://169.254.169.254/latest/meta-data/",  # cloud metadata (link-local)
    "http://10.0.0.1:6379/",
    "http://192.168.1.10/hook",
    "http://172.16.0.3/",
    "http://127.0.0.1:8080/__admin/reset",
    "http://[::1]/",
    "http://[::ffff:127.0.0.1]/",  # IPv4-mapped IPv6
    "http://[fd00:ec2::254]/",  # AWS metadata over IPv6 (unique local)
    "http://[fe80::1]/",
    "http://0x7f000001/",  # 127.0.0.1, as a resolver reads it
    "http://2130706433/",
    "http://127.1/",
    "http://0177.0.0.1/",
    "http://0.0.0.0/",
    "http://100.64.0.1/",  # carrier-grade NAT
    "http://224.0.0.1/",  # multicast
    "http://[64:ff9b::7f00:1]/",  # NAT64's well-known prefix: 127.0.0.1 through a translator
    "http://[64:ff9b::a9fe:a9fe]/",  # ... 169.254.169.254
    "http://[64:ff9b:1::a00:1]/",  # the local-use NAT64 prefix: 10.0.0.1
    "http://[::127.0.0.1]/",  # IPv4-compatible
    "http://[::a9fe:a9fe]/",
    "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",  # Teredo
]


@pytest.mark.parametrize("url", INSIDE)
async def test_a_callback_aimed_inside_is_refused_at_registration(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str, url: str
) -> None:
    headers = {"X-API-Key": api_key}
    registered = await client.put(PATH, json={"url": url}, headers=headers)
    assert registered.status_code == 400, (url, registered.text)
    assert registered.json()["detail"].startswith("url: points at")
    per_transaction = await client.post(
        "/api/v1/relay/direct", json={"to": DEAD, "callbackUrl": url}, headers=headers
    )
    assert per_transaction.status_code == 400, url
    assert per_transaction.json()["detail"].startswith("callbackUrl: points at")
    assert await count_rows(runtime) == 0


def test_production_wants_https_callbacks_and_an_allowlist_opens_a_network(
    infra_env: dict[str, Any],
) -> None:
    production = ApiSettings(**{**infra_env, "environment": "production"})
    with pytest.raises(RefusedDestination, match="https"):
        production.callback_policy().check_url("http://client.example/hook")
    production.callback_policy().check_url("https://client.example/hook")
    opened = ApiSettings(**infra_env, callback_allowed_networks="10.20.0.0/16")
    opened.callback_policy().check_url("http://10.20.3.4/hook")
    with pytest.raises(RefusedDestination):
        opened.callback_policy().check_url("http://10.21.3.4/hook")
