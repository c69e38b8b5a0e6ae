"""POST /api/v1/relay/transactions/{id}/speed-up: a transaction not sent yet takes the new
speed (and the fast lane) before it is sent; one at the executor is replaced there at its
nonce; one being sent, mined or final is refused 409; the spend policy judges the new speed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from api_testkit import DEAD, accept_direct, receive_all, row_of, set_row

from relay_api.app import create_app
from relay_api.runtime import Runtime
from relay_core import jsonutil
from relay_core.executor import ExecutorClient
from relay_testkit import STUB_DEV_KEY, start_stub


def _path(tx_id: str) -> str:
    return f"/api/v1/relay/transactions/{tx_id}/speed-up"


async def test_one_not_sent_yet_takes_the_new_speed_and_the_fast_lane(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str, sqs: Any, queues: Any
) -> None:
    tx_id = await accept_direct(client, api_key, speed="average")
    assert (await row_of(runtime, tx_id)).lane == "normal"
    answer = await client.post(
        _path(tx_id), json={"speed": "fastest"}, headers={"X-API-Key": api_key}
    )
    assert answer.status_code == 200, answer.text
    assert answer.json() | {"detail": None} == {
        "transactionId": tx_id,
        "status": "pending",
        "speed": "fastest",
        "speedUp": "done",
        "hash": None,
        "detail": None,
    }
    row = await row_of(runtime, tx_id)
    assert (row.request["speed"], row.lane) == ("fastest", "fast")
    # A message for it in the fast lane too: whichever is received first sends it.
    name, _ = runtime.settings.lane_queues("fast")
    fast_url = (await sqs.get_queue_url(QueueName=name))["QueueUrl"]
    fast = [jsonutil.loads(m["Body"])["transactionId"] for m in await receive_all(sqs, fast_url)]
    assert fast == [tx_id]


async def test_too_late_being_sent_or_another_clients_is_refused(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str, new_key: Any
) -> None:
    headers = {"X-API-Key": api_key}
    tx_id = await accept_direct(client, api_key)
    for status, code in (("processing", 409), ("mined", 409), ("confirmed", 409)):
        await set_row(runtime, tx_id, status=status)
        answer = await client.post(_path(tx_id), json={"speed": "fastest"}, headers=headers)
        assert answer.status_code == code, answer.text
        assert status in answer.json()["detail"] or "sending" in answer.json()["detail"]
    other = await new_key("other")
    refused = await client.post(
        _path(tx_id), json={"speed": "fastest"}, headers={"X-API-Key": other}
    )
    assert refused.status_code == 404
    bad = await client.post(_path(tx_id), json={"speed": "ludicrous"}, headers=headers)
    assert bad.status_code == 422
    admin = await new_key("ops", admin=True)
    assert (
        await client.post(_path(tx_id), json={"speed": "fast"}, headers={"X-API-Key": admin})
    ).status_code == 403


async def test_the_spend_policy_judges_the_new_speed(
    client: httpx.AsyncClient, runtime: Runtime, new_key: Any
) -> None:
    key = await new_key("acme")
    admin = await new_key("ops", admin=True)
    changed = await client.patch(
        "/api/v1/admin/clients/acme", json={"speeds": ["average"]}, headers={"X-API-Key": admin}
    )
    assert changed.status_code == 200, changed.text
    tx_id = await accept_direct(client, key, speed="average")
    refused = await client.post(_path(tx_id), json={"speed": "fastest"}, headers={"X-API-Key": key})
    assert refused.status_code == 403, refused.text
    assert refused.json()["detail"].startswith("policy speeds: ")
    assert (await row_of(runtime, tx_id)).request["speed"] == "average"


@pytest.mark.parametrize("settings_overrides", [{"executor_timeout_s": 2.0}])
async def test_one_at_the_executor_is_replaced_there_and_takes_its_new_hash(
    api_settings: Any, queues: Any, api_key: str, tmp_path: Path
) -> None:
    stub = start_stub(tmp_path)
    stub.lifecycle(delay_sent_ms=0, delay_submitted_ms=0, delay_mined_ms=600_000)
    settings = api_settings.model_copy(update={"executor_url": stub.base_url})
    app = create_app(settings)
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                runtime: Runtime = app.state.runtime
                headers = {"X-API-Key": api_key}
                tx_id = await accept_direct(client, api_key)
                executor = ExecutorClient(stub.base_url, STUB_DEV_KEY, "relayer-1")
                created = await executor.submit(
                    {"to": DEAD, "data": "0x", "value": "0", "speed": "average"}
                )
                for _ in range(50):
                    sent = await executor.get(created.id)
                    if sent.hash:
                        break
                await executor.aclose()
                await set_row(
                    runtime,
                    tx_id,
                    status="submitted",
                    executor_tx_id=created.id,
                    hash=sent.hash,
                    relayer="relayer-1",
                )
                answer = await client.post(_path(tx_id), json={"speed": "fastest"}, headers=headers)
                assert answer.status_code == 200, answer.text
                body = answer.json()
                assert (body["speedUp"], body["status"]) == ("sent", "submitted")
                assert body["hash"] not in (None, sent.hash)
                row = await row_of(runtime, tx_id)
                assert (row.hash, row.request["speed"]) == (body["hash"], "fastest")
                assert row.executor_tx_id == created.id  # one row, one executor id
                status = await client.get(f"/api/v1/relay/status/{tx_id}", headers=headers)
                assert status.json()["hash"] == body["hash"]

                stub.kill()  # an executor that does not answer: nothing changes, 503
                again = await client.post(_path(tx_id), json={"speed": "fast"}, headers=headers)
                assert again.status_code == 503, again.text
                assert (await row_of(runtime, tx_id)).request["speed"] == "fastest"
    finally:
        stub.stop()
