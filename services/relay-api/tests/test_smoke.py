from __future__ import annotations

import httpx
from api_testkit import DEAD


async def test_direct_submit_returns_202_with_location_and_pending_status(
    client: httpx.AsyncClient, api_key: str
) -> None:
    response = await client.post(
        "/api/v1/relay/direct", json={"to": DEAD, "value": "1"}, headers={"X-API-Key": api_key}
    )
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["status"] == "pending"
    assert response.headers["location"] == f"/api/v1/relay/status/{body['transactionId']}"
