"""A pool of relayers (memory mode): each one's balance (``GET .../balance``, the
``relayer_balances`` fault) and the per-relayer jam (``jam_relayers``), which holds one relayer's
transactions short of being mined while the others go on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import ValidationError
from stub_testkit import Stub, make_settings

from relayer_stub.faults.schemas import FaultConfig

DEFAULT_BALANCE = 10**21
POOL = "relayer-1,relayer-2,relayer-3"


@pytest.fixture
async def pool(stub_factory: Any) -> AsyncIterator[Stub]:
    async with stub_factory(relayer_ids=POOL) as running_stub:
        yield running_stub


async def balance(stub: Stub, relayer_id: str) -> Any:
    response = await stub.client.get(f"/api/v1/relayers/{relayer_id}/balance", headers=stub.auth)
    assert response.status_code == 200, response.text
    return response.json()


async def status(stub: Stub, relayer_id: str) -> dict[str, Any]:
    response = await stub.client.get(f"/api/v1/relayers/{relayer_id}/status", headers=stub.auth)
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


async def send_as(stub: Stub, relayer_id: str, **overrides: Any) -> dict[str, Any]:
    stub.relayer = relayer_id
    try:
        return await stub.send_ok(**overrides)
    finally:
        stub.relayer = "relayer-1"


async def patch_faults(stub: Stub, body: dict[str, Any]) -> dict[str, Any]:
    return await stub.admin("PATCH", "faults", body)


# -- balance ----------------------------------------------------------------------------------


async def test_every_relayer_has_an_ample_balance_as_a_json_integer_in_wei(pool: Stub) -> None:
    response = await pool.client.get("/api/v1/relayers/relayer-2/balance", headers=pool.auth)

    assert response.status_code == 200
    assert response.json() == {
        "success": True,
        "data": {"balance": DEFAULT_BALANCE, "unit": "wei"},
        "error": None,
    }
    # a JSON integer (above 2**64, so not something orjson writes), not a string
    assert b'"balance":1000000000000000000000,' in response.content
    assert (await status(pool, "relayer-2"))["balance"] == str(DEFAULT_BALANCE)


async def test_a_balance_set_by_the_fault_is_reported_by_balance_and_status(pool: Stub) -> None:
    faults = await patch_faults(pool, {"relayer_balances": {"relayer-2": 0, "relayer-3": 2**100}})

    assert faults["config"]["relayer_balances"] == {"relayer-2": 0, "relayer-3": 2**100}
    assert (await balance(pool, "relayer-2"))["data"] == {"balance": 0, "unit": "wei"}
    assert (await balance(pool, "relayer-3"))["data"]["balance"] == 2**100
    assert (await balance(pool, "relayer-1"))["data"]["balance"] == DEFAULT_BALANCE
    assert (await status(pool, "relayer-2"))["balance"] == "0"
    assert (await status(pool, "relayer-3"))["balance"] == str(2**100)

    await patch_faults(pool, {"relayer_balances": {}})
    assert (await balance(pool, "relayer-2"))["data"]["balance"] == DEFAULT_BALANCE


async def test_the_balance_of_an_unknown_relayer_is_404_and_needs_the_api_key(pool: Stub) -> None:
    unknown = await pool.client.get("/api/v1/relayers/nope/balance", headers=pool.auth)
    anonymous = await pool.client.get("/api/v1/relayers/relayer-1/balance")

    assert unknown.status_code == 404
    assert unknown.json() == {
        "success": False,
        "data": None,
        "error": "Relayer with ID nope not found",
    }
    assert anonymous.status_code == 401


async def test_faults_apply_to_the_balance_route_like_other_gets(pool: Stub) -> None:
    await pool.admin("PUT", "faults", {"error_next": 1, "error_status": 502})

    failed = await pool.client.get("/api/v1/relayers/relayer-1/balance", headers=pool.auth)
    answered = await pool.client.get("/api/v1/relayers/relayer-1/balance", headers=pool.auth)

    assert failed.status_code == 502
    assert answered.status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        {"relayer_balances": {"relayer-2": -1}},
        {"relayer_balances": {"relayer-2": "lots"}},
        {"relayer_balances": {"relayer-2": True}},
        {"relayer_balances": {"relayer-9": 5}},  # not one of the stub's relayers
        {"jam_relayers": ["relayer-9"]},
        {"jam_relayers": "relayer-2"},
    ],
)
async def test_invalid_per_relayer_faults_are_refused(pool: Stub, body: dict[str, Any]) -> None:
    for method in ("PATCH", "PUT"):
        response = await pool.client.request(method, "/__admin/faults", json=body)

        assert response.status_code == 422, (method, response.text)
        assert response.json()["error"] == "validation_error"
    config = (await pool.admin("GET", "faults"))["config"]
    assert (config["jam_relayers"], config["relayer_balances"]) == ([], {})


def test_per_relayer_faults_in_the_settings_must_name_known_relayers(tmp_path: Any) -> None:
    with pytest.raises(ValidationError, match="relayer-9"):
        make_settings(tmp_path, relayer_ids=POOL, faults={"jam_relayers": ["relayer-9"]})

    settings = make_settings(
        tmp_path, relayer_ids=POOL, faults={"relayer_balances": {"relayer-3": 7}}
    )
    assert settings.faults.relayer_balances == {"relayer-3": 7}
    assert FaultConfig(jam_relayers=[" relayer-2", "relayer-2", ""]).jam_relayers == ["relayer-2"]


# -- jam --------------------------------------------------------------------------------------


async def test_a_jammed_relayer_accepts_but_mines_nothing_until_the_jam_is_lifted(
    pool: Stub,
) -> None:
    faults = await patch_faults(pool, {"jam_relayers": ["relayer-2"]})
    assert faults["config"]["jam_relayers"] == ["relayer-2"]

    held = [await send_as(pool, "relayer-2", value=str(v)) for v in (1, 2)]
    free = await send_as(pool, "relayer-1")
    other = await send_as(pool, "relayer-3")

    confirmed = await pool.wait_for(free["id"])
    assert confirmed["status"] == "confirmed"
    assert (await pool.wait_for(other["id"]))["status"] == "confirmed"
    # what a jammed relayer does not have: a recent confirmation (the others do)
    assert (await status(pool, "relayer-1"))["last_confirmed_transaction_timestamp"] == (
        confirmed["confirmed_at"]
    )
    assert (await status(pool, "relayer-2"))["last_confirmed_transaction_timestamp"] is None
    for tx in held:
        await pool.wait_for(tx["id"], "submitted")
    await asyncio.sleep(0.2)  # zero lifecycle delays: time enough to have been mined
    pool.relayer = "relayer-2"
    assert [(await pool.tx(tx["id"]))["status"] for tx in held] == ["submitted"] * 2
    pool.relayer = "relayer-1"
    assert (await pool.ledger(relayer_id="relayer-2"))["count"] == 2
    assert (await status(pool, "relayer-2"))["pending_transactions_count"] == 2
    listed = await pool.client.get("/api/v1/relayers/relayer-2/transactions", headers=pool.auth)
    assert {tx["id"] for tx in listed.json()["data"]} == {tx["id"] for tx in held}
    stats = await pool.admin("GET", "stats")
    assert stats["jammed_relayers"] == {"relayer-2": 2}

    await patch_faults(pool, {"jam_relayers": []})

    finished = [await pool.wait_for(tx["id"]) for tx in held]
    assert [tx["status"] for tx in finished] == ["confirmed"] * 2
    assert [tx["nonce"] for tx in finished] == [0, 1]
    assert (await status(pool, "relayer-2"))["pending_transactions_count"] == 0
    assert (await pool.admin("GET", "stats"))["jammed_relayers"] == {}


async def test_a_jam_holds_what_was_already_on_its_way_and_a_reset_lifts_it(
    stub_factory: Any,
) -> None:
    # A submitted transaction waits long enough for the jam to catch it before it is mined.
    async with stub_factory(relayer_ids=POOL, lifecycle={"delay_mined_ms": 300}) as pool:
        tx = await send_as(pool, "relayer-3")
        await pool.wait_for(tx["id"], "submitted")
        await patch_faults(pool, {"jam_relayers": ["relayer-3"]})
        await asyncio.sleep(0.5)
        pool.relayer = "relayer-3"
        assert (await pool.tx(tx["id"]))["status"] == "submitted"

        await pool.client.post("/__admin/reset")  # faults back to the settings: no jam
        after = await send_as(pool, "relayer-3")
        pool.relayer = "relayer-3"
        assert (await pool.wait_for(after["id"], timeout_s=5))["status"] == "confirmed"
