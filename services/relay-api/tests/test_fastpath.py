"""relay_api.fastpath: a well-formed submission or status read is served past FastAPI's
routing with the route's own answer; anything else reaches the app and gets the app's
answer."""

from __future__ import annotations

from typing import Any

import httpx
from api_testkit import DEAD

from relay_api.fastpath import FastPath
from relay_api.runtime import Runtime


def _fast(client: httpx.AsyncClient) -> FastPath:
    app: Any = client._transport.app  # type: ignore[attr-defined]
    layer = app.middleware_stack
    while not isinstance(layer, FastPath):
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


async def test_status_reads_are_served_here_when_the_id_is_a_plain_uuid(
    client: httpx.AsyncClient, api_key: str, new_key: Any
) -> None:
    key = {"X-API-Key": api_key}
    accepted = await client.post("/api/v1/relay/direct", json={"to": DEAD}, headers=key)
    tx_id = accepted.json()["transactionId"]
    fast = _fast(client)
    served = fast.served
    ok = await client.get(f"/api/v1/relay/status/{tx_id}", headers=key)
    upper = await client.get(f"/api/v1/relay/status/{tx_id.upper()}", headers=key)
    assert ok.status_code == upper.status_code == 200
    assert ok.json()["transactionId"] == upper.json()["transactionId"] == tx_id
    assert ok.headers["x-cache"] in {"hit", "miss"}
    other = {"X-API-Key": await new_key("other")}
    assert (await client.get(f"/api/v1/relay/status/{tx_id}", headers=other)).status_code == 404
    assert (await client.get(f"/api/v1/relay/status/{tx_id}")).status_code == 401
    assert fast.served - served == 4
    passed = fast.passed
    # Not in the usual form: the app decides, as it always has.
    hex_only = await client.get(f"/api/v1/relay/status/{tx_id.replace('-', '')}", headers=key)
    assert hex_only.status_code == 200
    assert (await client.get("/api/v1/relay/status/nope", headers=key)).status_code == 422
    assert fast.passed - passed == 2
    metrics = (await client.get("/metrics")).text
    assert 'route="/api/v1/relay/status/{transactionId}",status="200"' in metrics


async def test_executor_webhooks_are_served_here_with_the_apps_refusals(
    client: httpx.AsyncClient,
) -> None:
    """No signing key is configured here: a webhook is the route's 401, counted on its route
    in the metrics; a body past the limit is the app's 413, refused before it gets here."""
    hook = "/api/v1/webhooks/oz-relayer"
    await client.get("/health")  # the app's middleware stack is built on its first request
    fast = _fast(client)
    served = fast.served
    unsigned = await client.post(hook, json={"id": "w-1", "event": "transaction_update"})
    assert unsigned.status_code == 401
    assert unsigned.json()["error"] == "unauthorized"
    huge = await client.post(
        hook, content=b"{" + b" " * 2_000_000 + b"}", headers={"X-Signature": "x"}
    )
    assert huge.status_code == 413
    assert set(huge.json()) == {"error", "detail"}
    assert fast.served - served == 1
    metrics = (await client.get("/metrics")).text
    assert 'route="/api/v1/webhooks/oz-relayer",status="401"' in metrics


async def test_a_well_formed_batch_is_served_here_and_the_rest_gets_the_apps_answers(
    client: httpx.AsyncClient, api_key: str
) -> None:
    """The same answers both ways: a batch validated from its bytes here, or by the app."""
    key = {"X-API-Key": api_key}
    batch = {"transactions": [{"to": DEAD, "value": str(n)} for n in range(3)]}
    first = await client.post(
        "/api/v1/relay/batch", json=batch, headers={**key, "Idempotency-Key": "b-1"}
    )
    again = await client.post(
        "/api/v1/relay/batch", json=batch, headers={**key, "Idempotency-Key": "b-1"}
    )
    assert first.status_code == again.status_code == 202, first.text
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json()
    assert [r["status"] for r in first.json()["results"]] == ["pending"] * 3
    fast = _fast(client)
    assert (fast.served, fast.passed) == (2, 0)
    refusals = [
        # reached the app: not well-formed
        ({"content": b"{", "headers": {**key, "Content-Type": "application/json"}}, 400),
        ({"json": {"transactions": [{"to": DEAD}, {"to": "0x12"}]}, "headers": key}, 422),
        ({"json": {"transactions": []}, "headers": key}, 422),
        ({"json": {"transactions": [{"to": DEAD}], "x": 1}, "headers": key}, 422),
        # served here, refused by the route's own checks
        ({"json": batch, "headers": {}}, 401),
        ({"json": batch, "headers": {**key, "Idempotency-Key": "bad key"}}, 400),
        (
            {
                "json": {"transactions": [{"to": DEAD}, {"to": DEAD, "gasLimit": "5"}]},
                "headers": key,
            },
            400,
        ),
    ]
    for request, status in refusals:
        response = await client.post("/api/v1/relay/batch", **request)
        assert response.status_code == status, (request, response.text)
        assert set(response.json()) >= {"error", "detail"}
    named = await client.post(
        "/api/v1/relay/batch",
        json={"transactions": [{"to": DEAD}, {"to": DEAD, "gasLimit": "5"}]},
        headers=key,
    )
    assert named.json()["detail"].startswith("transactions.1.gasLimit"), named.text
    assert (fast.served, fast.passed) == (6, 4)
