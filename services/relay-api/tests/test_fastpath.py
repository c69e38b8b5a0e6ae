"""relay_api.fastpath: a well-formed submission is served past FastAPI's routing with the
route's own answer; anything else reaches the app and gets the app's answer."""

from __future__ import annotations

from typing import Any

import httpx
from api_testkit import DEAD

from relay_api.fastpath import FastSubmit
from relay_api.runtime import Runtime


def _fast(client: httpx.AsyncClient) -> FastSubmit:
    app: Any = client._transport.app  # type: ignore[attr-defined]
    layer = app.middleware_stack
    while not isinstance(layer, FastSubmit):
        layer = layer.app
    return layer


async def test_a_well_formed_submission_is_served_past_the_framework(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str
) -> None:
    headers = {"X-API-Key": api_key, "Idempotency-Key": "fast-1"}
    first = await client.post("/api/v1/relay/direct", json={"to": DEAD}, headers=headers)
    again = await client.post("/api/v1/relay/direct", json={"to": DEAD}, headers=headers)
    fast = _fast(client)
    assert (fast.served, fast.passed) == (2, 0)
    assert first.status_code == again.status_code == 202
    assert first.headers["location"] == f"/api/v1/relay/status/{first.json()['transactionId']}"
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json()
    assert "x-request-id" in first.headers
    metrics = (await client.get("/metrics")).text
    assert 'route="/api/v1/relay/direct",status="202"' in metrics


async def test_refusals_are_the_apps_own_whichever_way_they_came(
    client: httpx.AsyncClient, api_key: str
) -> None:
    key = {"X-API-Key": api_key}
    cases = [
        # reached the app: not well-formed
        ({"content": b"{", "headers": {**key, "Content-Type": "application/json"}}, 400),
        ({"json": {"to": "0x12"}, "headers": key}, 422),
        ({"content": b"to=x", "headers": {**key, "Content-Type": "text/plain"}}, 415),
        # served here, refused by the route's own checks and the app's handlers
        ({"json": {"to": DEAD}, "headers": {}}, 401),
        ({"json": {"to": DEAD}, "headers": {"X-API-Key": "rk_nope"}}, 401),
        ({"json": {"to": DEAD}, "headers": {**key, "Idempotency-Key": "bad key"}}, 400),
        ({"json": {"to": DEAD, "gasLimit": "1"}, "headers": key}, 400),
    ]
    for request, status in cases:
        response = await client.post("/api/v1/relay/direct", **request)
        assert response.status_code == status, (request, response.text)
        assert set(response.json()) >= {"error", "detail"}
    fast = _fast(client)
    assert (fast.served, fast.passed) == (4, 3)
