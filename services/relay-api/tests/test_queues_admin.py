"""The admin queue endpoints: an operator reads each lane's switch, its consumers and the
queues' depths, and switches a lane; a client key may do neither; bad input is named."""

from __future__ import annotations

from typing import Any

import httpx

from relay_api.runtime import Runtime
from relay_core import controls


async def test_an_admin_reads_and_switches_a_lane(
    client: httpx.AsyncClient, runtime: Runtime, new_key: Any, queues: tuple[str, str]
) -> None:
    admin = {"X-API-Key": await new_key("ops", admin=True)}
    view = (await client.get("/api/v1/admin/queues", headers=admin)).json()
    assert view["lanes"] == [
        {"lane": lane, "state": "running", "reason": None, "changedBy": None, "changedAt": None}
        for lane in ("normal", "fast")
    ]
    empty = {"visible": 0, "inFlight": 0, "delayed": 0}
    assert view["depths"] == {"queue": empty, "dlq": empty, "fast": empty, "fast-dlq": empty}
    assert view["consumers"] == []

    changed = await client.patch(
        "/api/v1/admin/queues/normal", json={"state": "paused", "reason": "deploy"}, headers=admin
    )
    assert changed.status_code == 200, changed.text
    lane = changed.json()["lanes"][0]
    assert (lane["state"], lane["reason"], lane["changedBy"]) == ("paused", "deploy", "ops")
    async with runtime.sessions() as session:
        assert await controls.lane_state(session, "normal") is controls.LaneState.paused


async def test_a_client_key_may_not_and_bad_input_is_named(
    client: httpx.AsyncClient, new_key: Any, queues: tuple[str, str]
) -> None:
    plain = {"X-API-Key": await new_key("acme")}
    assert (await client.get("/api/v1/admin/queues", headers=plain)).status_code == 403
    refused = await client.patch(
        "/api/v1/admin/queues/normal", json={"state": "paused"}, headers=plain
    )
    assert refused.status_code == 403
    admin = {"X-API-Key": await new_key("ops", admin=True)}
    unknown = await client.patch(
        "/api/v1/admin/queues/slow", json={"state": "paused"}, headers=admin
    )
    assert unknown.status_code == 422
    assert unknown.json()["fields"][0]["field"] == "path.lane"
    bad = await client.patch("/api/v1/admin/queues/normal", json={"state": "off"}, headers=admin)
    assert bad.status_code == 422
    assert bad.json()["fields"][0]["field"] == "state"
