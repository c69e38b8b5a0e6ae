"""The OZ Relayer v1.x API subset: shapes, validation, auth, listing."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from stub_testkit import API_KEY, DEAD, Stub, tx_body

RESPONSE_FIELDS = {
    "id",
    "hash",
    "status",
    "status_reason",
    "created_at",
    "sent_at",
    "confirmed_at",
    "gas_price",
    "gas_limit",
    "nonce",
    "value",
    "from",
    "to",
    "relayer_id",
    "data",
    "max_fee_per_gas",
    "max_priority_fee_per_gas",
    "signature",
    "speed",
    "is_canceled",
}
UNAUTHORIZED = {"success": False, "code": 401, "error": "Unauthorized", "message": "Unauthorized"}


async def test_send_answers_200_with_the_new_pending_record_in_the_upstream_envelope(
    paused_stub: Stub,
) -> None:
    response = await paused_stub.send()

    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"success", "data", "error"}
    assert body["success"] is True
    assert body["error"] is None
    tx = body["data"]
    assert set(tx) == RESPONSE_FIELDS
    assert uuid.UUID(tx["id"]).version == 4
    assert tx["relayer_id"] == "relayer-1"
    assert tx["from"] == paused_stub.settings.relayer_address
    assert tx["to"] == DEAD
    assert tx["data"] == "0x"
    assert tx["value"] == "0xe8d4a51000"
    assert tx["gas_limit"] == 21000
    assert tx["speed"] == "fast"
    assert tx["status"] == "pending"
    assert tx["is_canceled"] is False
    for empty in ("status_reason", "hash", "nonce", "sent_at", "confirmed_at", "signature"):
        assert tx[empty] is None, empty
    assert datetime.fromisoformat(tx["created_at"]).tzinfo is not None


@pytest.mark.parametrize(
    ("sent", "returned"),
    [
        ("1000000000000", "0xe8d4a51000"),
        (1000000000000, "0xe8d4a51000"),
        ("0xe8d4a51000", "0xe8d4a51000"),
        ("0", "0x0"),
        (str(2**256 - 1), hex(2**256 - 1)),
    ],
)
async def test_value_comes_back_as_hex_whatever_form_it_was_sent_in(
    paused_stub: Stub, sent: Any, returned: str
) -> None:
    tx = await paused_stub.send_ok(value=sent)

    assert tx["value"] == returned


async def test_every_send_is_a_new_transaction_even_with_an_identical_body(
    paused_stub: Stub,
) -> None:
    first = await paused_stub.send_ok()
    second = await paused_stub.send_ok()

    assert first["id"] != second["id"]
    assert (await paused_stub.ledger())["count"] == 2


async def test_fee_fields_are_returned_as_decimal_strings(paused_stub: Stub) -> None:
    legacy = await paused_stub.send_ok(speed=..., gas_price=20_000_000_000)
    eip1559 = await paused_stub.send_ok(
        speed=..., max_fee_per_gas=30_000_000_000, max_priority_fee_per_gas=2_000_000_000
    )

    assert legacy["gas_price"] == "20000000000"
    assert eip1559["max_fee_per_gas"] == "30000000000"
    assert eip1559["max_priority_fee_per_gas"] == "2000000000"


def _in(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"value": ...}, "missing field `value`"),
        ({"speed": ...}, "Transaction must specify either gasPrice, speed, or EIP1559 parameters"),
        ({"gas_price": 1}, "Cannot mix different transaction types"),
        ({"to": ..., "data": ...}, "Both txs `to` and `data` fields are missing"),
        ({"valid_until": "2020-01-01T00:00:00Z"}, "The validUntil time cannot be in the past"),
        ({"valid_until": "tomorrow"}, "Invalid validUntil datetime format"),
        ({"valid_until": "2999-01-01"}, "Invalid validUntil datetime format"),
        ({"speed": ..., "gas_price": "12312313123"}, 'invalid type: string "12312313123"'),
        ({"speed": "slow"}, "unknown variant `slow`"),
        ({"speed": ..., "max_fee_per_gas": 10}, "EIP1559 transactions require both"),
        (
            {"speed": ..., "max_fee_per_gas": 1, "max_priority_fee_per_gas": 2},
            "maxFeePerGas must be greater than or equal to maxPriorityFeePerGas",
        ),
        ({"value": -1}, "invalid value: integer `-1`"),
        ({"value": 2**64}, "invalid type: floating point"),  # serde_json: > u64 is an f64
        ({"value": 1.5}, "invalid type: floating point"),
        ({"value": "12abc"}, 'invalid value: string "12abc"'),
        ({"value": str(2**256)}, "number too large"),
        ({"gas_limit": 20999}, "Gas limit 20999 is below the intrinsic gas 21000"),
        ({"data": "0x0001", "gas_limit": 21000}, "below the intrinsic gas 21020"),
    ],
)
async def test_an_invalid_send_gets_400_with_upstreams_message_and_is_not_recorded(
    paused_stub: Stub, overrides: dict[str, Any], message: str
) -> None:
    response = await paused_stub.send(**overrides)

    assert response.status_code == 400
    body = response.json()
    assert body["success"] is False
    assert body["data"] is None
    assert message in body["error"]
    assert (await paused_stub.ledger())["count"] == 0


async def test_a_future_valid_until_and_an_omitted_gas_limit_are_accepted(
    paused_stub: Stub,
) -> None:
    tx = await paused_stub.send_ok(valid_until=_in(3600), gas_limit=...)

    assert tx["gas_limit"] is None
    assert "valid_until" not in tx


async def test_malformed_json_gets_a_plain_text_400_like_actix(paused_stub: Stub) -> None:
    response = await paused_stub.client.post(
        paused_stub.tx_path, content=b"{not json", headers=paused_stub.auth
    )

    assert response.status_code == 400
    assert response.headers["content-type"].startswith("text/plain")
    assert response.text.startswith("Json deserialize error")


async def test_an_unknown_relayer_gets_a_404_envelope(paused_stub: Stub) -> None:
    paused_stub.relayer = "nobody"

    sent = await paused_stub.send()
    listed = await paused_stub.client.get(paused_stub.tx_path, headers=paused_stub.auth)

    for response in (sent, listed):
        assert response.status_code == 404
        assert response.json() == {
            "success": False,
            "data": None,
            "error": "Relayer with ID nobody not found",
        }


async def test_an_unknown_transaction_gets_a_404_envelope_naming_its_id(
    paused_stub: Stub,
) -> None:
    missing = str(uuid.uuid4())

    response = await paused_stub.get(missing)

    assert response.status_code == 404
    assert response.json()["error"] == f"Transaction with ID {missing} not found"


@pytest.mark.parametrize(
    "headers",
    [
        [],
        [("Authorization", "Bearer wrong-key-wrong-key-wrong-key-wrong-key")],
        [("Authorization", f"Basic {API_KEY}")],
        [("Authorization", f"Bearer {API_KEY} extra")],
        [("Authorization", f"Bearer {API_KEY}"), ("Authorization", f"Bearer {API_KEY}")],
        [("Authorization", f"bearer {API_KEY}")],
    ],
    ids=["none", "wrong-key", "basic", "space", "twice", "lowercase-scheme"],
)
async def test_requests_without_exactly_the_right_bearer_key_get_upstreams_401(
    paused_stub: Stub, headers: list[tuple[str, str]]
) -> None:
    for method, path in [
        ("POST", paused_stub.tx_path),
        ("GET", paused_stub.tx_path),
        ("GET", f"{paused_stub.tx_path}/{uuid.uuid4()}"),
        ("GET", "/api/v1/no-such-route"),
    ]:
        response = await paused_stub.client.request(
            method, path, headers=httpx.Headers(headers), json=tx_body()
        )
        assert response.status_code == 401, (method, path)
        assert response.json() == UNAUTHORIZED
    assert (await paused_stub.ledger())["count"] == 0


async def test_health_is_plain_ok_and_ready_is_json_both_without_auth(paused_stub: Stub) -> None:
    health = await paused_stub.client.get("/api/v1/health")
    ready = await paused_stub.client.get("/api/v1/ready")

    assert health.status_code == 200
    assert health.text == "OK"
    assert ready.status_code == 200
    assert ready.json()["ready"] is True
    assert ready.json()["status"] == "healthy"


async def test_the_list_is_newest_first_and_paginated(paused_stub: Stub) -> None:
    ids = [(await paused_stub.send_ok())["id"] for _ in range(5)]
    newest_first = list(reversed(ids))

    pages = []
    for page in (1, 2, 3):
        response = await paused_stub.client.get(
            paused_stub.tx_path, params={"page": page, "per_page": 2}, headers=paused_stub.auth
        )
        assert response.status_code == 200
        body = response.json()
        assert body["pagination"] == {"current_page": page, "per_page": 2, "total_items": 5}
        pages.append([tx["id"] for tx in body["data"]])

    assert pages == [newest_first[0:2], newest_first[2:4], newest_first[4:5]]


async def test_the_list_defaults_to_ten_per_page_and_tolerates_a_trailing_slash(
    paused_stub: Stub,
) -> None:
    for _ in range(12):
        await paused_stub.send_ok()

    response = await paused_stub.client.get(paused_stub.tx_path + "/", headers=paused_stub.auth)

    assert response.status_code == 200
    assert len(response.json()["data"]) == 10
    assert response.json()["pagination"]["total_items"] == 12


async def test_the_list_filters_on_status_case_insensitively(paused_stub: Stub) -> None:
    kept = [(await paused_stub.send_ok())["id"] for _ in range(3)]
    canceled = await paused_stub.send_ok()
    cancel = await paused_stub.client.delete(
        f"{paused_stub.tx_path}/{canceled['id']}", headers=paused_stub.auth
    )
    assert cancel.status_code == 200

    async def listed(status: str) -> list[str]:
        response = await paused_stub.client.get(
            paused_stub.tx_path, params={"status": status}, headers=paused_stub.auth
        )
        assert response.status_code == 200, response.text
        assert response.json()["pagination"]["total_items"] == len(response.json()["data"])
        return [tx["id"] for tx in response.json()["data"]]

    assert await listed("CANCELED") == [canceled["id"]]
    assert await listed("Pending") == list(reversed(kept))
    assert await listed("confirmed") == []
    bad = await paused_stub.client.get(
        paused_stub.tx_path, params={"status": "nope"}, headers=paused_stub.auth
    )
    assert bad.status_code == 400


async def test_a_transaction_is_found_by_id_whatever_relayer_is_in_the_path(
    stub_factory: Any,
) -> None:
    async with stub_factory(relayer_ids="relayer-1,relayer-2") as stub:
        tx = await stub.send_ok()
        stub.relayer = "relayer-2"

        found = await stub.tx(tx["id"])

    assert found["relayer_id"] == "relayer-1"


async def test_a_second_relayer_has_its_own_from_address(stub_factory: Any) -> None:
    async with stub_factory(relayer_ids="relayer-1,relayer-2") as stub:
        first = await stub.send_ok()
        stub.relayer = "relayer-2"
        second = await stub.send_ok()

    assert re.fullmatch(r"0x[0-9a-fA-F]{40}", second["from"])
    assert first["from"] != second["from"]


async def test_a_request_id_is_echoed_or_generated(paused_stub: Stub) -> None:
    echoed = await paused_stub.client.get("/api/v1/health", headers={"x-request-id": "abc-123"})
    generated = await paused_stub.send()

    assert echoed.headers["x-request-id"] == "abc-123"
    assert uuid.UUID(generated.headers["x-request-id"])


async def test_the_relayer_status_counts_transactions_in_flight(paused_stub: Stub) -> None:
    await paused_stub.send_ok()
    await paused_stub.send_ok()

    response = await paused_stub.client.get(
        "/api/v1/relayers/relayer-1/status", headers=paused_stub.auth
    )

    assert response.status_code == 200
    status = response.json()["data"]
    assert status["network_type"] == "evm"
    assert status["pending_transactions_count"] == 2
