"""Replace (``PUT …/transactions/{id}``) in memory mode: the same transaction (id, nonce) with
a new body's terms, priced again from its speed; refused once final or canceled."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from stub_testkit import Stub, WebhookReceiver

HASH = re.compile(r"^0x[0-9a-f]{64}$")
OTHER = "0x1111111111111111111111111111111111111111"
NOOP_REASON = "Transaction is expired. Replacing with NOOP."
WRONG_STATE = (
    "Invalid transaction state for replace_transaction. Current: {}, "
    "Expected one of: [Pending, Sent, Submitted]"
)


def in_an_hour() -> str:
    return (datetime.now(UTC) + timedelta(hours=1)).isoformat()


async def replaced(stub: Stub, tx_id: str, **overrides: Any) -> dict[str, Any]:
    response = await stub.replace(tx_id, **overrides)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert set(body) == {"success", "data", "error"}
    assert body["success"] is True
    assert body["error"] is None
    data: dict[str, Any] = body["data"]
    return data


async def test_replacing_a_pending_transaction_takes_the_new_terms_and_keeps_id_and_status(
    paused_stub: Stub,
) -> None:
    created = await paused_stub.send_ok(value="5")

    tx = await replaced(
        paused_stub,
        created["id"],
        to=OTHER,
        value="7",
        data="0x1234",
        gas_limit=30_000,
        speed="average",
    )

    assert tx["id"] == created["id"]
    assert tx["status"] == "pending"
    assert (tx["to"], tx["value"], tx["data"]) == (OTHER, "0x7", "0x1234")
    assert (tx["gas_limit"], tx["speed"]) == (30_000, "average")
    assert (tx["hash"], tx["nonce"], tx["gas_price"]) == (None, None, None)
    assert await paused_stub.tx(created["id"]) == tx
    await paused_stub.admin("PATCH", "lifecycle", {"paused": False})
    final = await paused_stub.wait_for(created["id"])
    assert final["status"] == "confirmed"
    assert (final["to"], final["value"], final["nonce"]) == (OTHER, "0x7", 0)
    assert final["gas_price"] == "1250000000"  # average: 1.25 x the 1 gwei base


async def test_a_replace_does_not_carry_explicit_fee_fields_over(paused_stub: Stub) -> None:
    created = await paused_stub.send_ok(
        speed=..., max_fee_per_gas=30_000_000_000, max_priority_fee_per_gas=2_000_000_000
    )

    legacy = await replaced(paused_stub, created["id"], speed=..., gas_price=99_000_000_000)
    eip1559 = await replaced(
        paused_stub,
        created["id"],
        speed=...,
        max_fee_per_gas=99_000_000_000,
        max_priority_fee_per_gas=1,
    )

    for tx in (legacy, eip1559):
        assert tx["gas_price"] is None
        assert tx["max_fee_per_gas"] is None
        assert tx["max_priority_fee_per_gas"] is None
        assert tx["speed"] == "fast"  # none in the body nor before: upstream's default
    await paused_stub.admin("PATCH", "lifecycle", {"paused": False})
    final = await paused_stub.wait_for(created["id"])
    assert (final["gas_price"], final["max_fee_per_gas"]) == ("1500000000", None)


async def test_replacing_a_submitted_transaction_signs_it_again_at_its_nonce_and_it_confirms(
    stub_factory: Any,
) -> None:
    async with stub_factory(lifecycle={"hold_at": "submitted"}) as stub:
        created = await stub.send_ok(value="5", speed="fast")
        before = await stub.wait_for(created["id"], "submitted")

        tx = await replaced(stub, created["id"], to=OTHER, value="9", speed="fastest")

        assert (tx["id"], tx["nonce"], tx["status"]) == (before["id"], before["nonce"], "submitted")
        assert HASH.match(tx["hash"])
        assert tx["hash"] != before["hash"]
        assert tx["signature"] != before["signature"]
        assert (tx["to"], tx["value"], tx["speed"]) == (OTHER, "0x9", "fastest")
        assert tx["gas_price"] == "2000000000"  # fastest: 2 x the 1 gwei base
        assert tx["gas_limit"] == before["gas_limit"]  # none in the body: the one it had
        assert tx["sent_at"] >= before["sent_at"]
        await stub.admin("PATCH", "lifecycle", {"hold_at": None})
        final = await stub.wait_for(created["id"])

    assert final["status"] == "confirmed"
    assert (final["hash"], final["nonce"]) == (tx["hash"], before["nonce"])
    assert (final["to"], final["value"], final["speed"]) == (OTHER, "0x9", "fastest")
    assert final["gas_price"] == "2000000000"


async def test_a_slower_speed_still_outbids_the_price_the_transaction_was_sent_at(
    stub_factory: Any,
) -> None:
    async with stub_factory(lifecycle={"hold_at": "submitted"}) as stub:
        created = await stub.send_ok(speed="fast")
        await stub.wait_for(created["id"], "submitted")

        tx = await replaced(stub, created["id"], speed="safeLow")

    assert tx["speed"] == "safeLow"
    assert tx["gas_price"] == str(1_500_000_000 * 125 // 100 + 1)  # not safeLow's 1 gwei


async def test_a_replace_is_sent_as_a_webhook(
    stub_factory: Any, webhook_receiver: WebhookReceiver
) -> None:
    async with stub_factory(webhook_url=webhook_receiver.url, lifecycle={"paused": True}) as stub:
        created = await stub.send_ok()
        await asyncio.sleep(0.1)
        assert webhook_receiver.bodies() == []  # paused: no change yet

        await replaced(stub, created["id"], to=OTHER, value="3")
        received = await webhook_receiver.wait_for_count(1)

    payload = json.loads(received[0].body)["payload"]
    assert (payload["id"], payload["status"]) == (created["id"], "pending")
    assert (payload["to"], payload["value"]) == (OTHER, "0x3")


async def test_a_replace_does_not_get_a_jammed_relayers_transaction_mined(
    stub_factory: Any,
) -> None:
    async with stub_factory(faults={"jam_relayers": ["relayer-1"]}) as stub:
        created = await stub.send_ok(value="5")
        before = await stub.wait_for(created["id"], "submitted")
        await asyncio.sleep(0.1)  # zero lifecycle delays: time enough to be held by the jam

        tx = await replaced(stub, created["id"], value="6", speed="fastest")
        await asyncio.sleep(0.3)

        assert (await stub.tx(created["id"]))["status"] == "submitted"
        await stub.admin("PATCH", "faults", {"jam_relayers": []})
        final = await stub.wait_for(created["id"])

    assert tx["hash"] != before["hash"]
    assert final["status"] == "confirmed"
    assert (final["hash"], final["value"]) == (tx["hash"], "0x6")


async def test_valid_until_stays_so_an_expired_transaction_replaced_ends_as_the_noop_again(
    stub_factory: Any,
) -> None:
    async with stub_factory(lifecycle={"hold_at": "submitted"}) as stub:
        created = await stub.send_ok(value="5")
        await stub.wait_for(created["id"], "submitted")
        expired = await stub.admin("POST", f"transactions/{created['id']}/expire")
        assert expired["status_reason"] == NOOP_REASON

        tx = await replaced(stub, created["id"], to=OTHER, value="9", valid_until=in_an_hour())
        await stub.admin("PATCH", "lifecycle", {"hold_at": None})
        final = await stub.wait_for(created["id"])

    assert (tx["to"], tx["value"], tx["status_reason"]) == (OTHER, "0x9", None)
    assert final["status"] == "confirmed"
    assert (final["to"], final["value"]) == (final["from"], "0x0")
    assert final["status_reason"] == NOOP_REASON


async def test_replacing_a_final_transaction_is_refused_with_400(stub: Stub) -> None:
    created = await stub.send_ok()
    confirmed = await stub.wait_for(created["id"], "confirmed")

    response = await stub.replace(created["id"], value="9")

    assert response.status_code == 400
    assert response.json() == {
        "success": False,
        "data": None,
        "error": WRONG_STATE.format("Confirmed"),
    }
    assert await stub.tx(created["id"]) == confirmed


async def test_a_canceled_transaction_cannot_be_replaced(stub_factory: Any) -> None:
    async with stub_factory(lifecycle={"hold_at": "submitted"}) as stub:
        submitted = await stub.send_ok()
        await stub.wait_for(submitted["id"], "submitted")
        await stub.admin("PATCH", "lifecycle", {"paused": True})
        pending = await stub.send_ok()
        for tx in (submitted, pending):
            cancel = await stub.client.delete(f"{stub.tx_path}/{tx['id']}", headers=stub.auth)
            assert cancel.status_code == 200
        noop = await stub.tx(submitted["id"])
        assert (noop["status"], noop["is_canceled"]) == ("submitted", True)

        still_canceling = await stub.replace(submitted["id"], value="9")
        canceled = await stub.replace(pending["id"], value="9")

        assert still_canceling.status_code == 400
        assert "a canceled transaction cannot be replaced" in still_canceling.json()["error"]
        assert await stub.tx(submitted["id"]) == noop
        assert canceled.status_code == 400
        assert canceled.json()["error"] == WRONG_STATE.format("Canceled")


async def test_replacing_an_unknown_transaction_or_at_an_unknown_relayer_gets_404(
    paused_stub: Stub,
) -> None:
    created = await paused_stub.send_ok()
    missing = str(uuid.uuid4())

    unknown_tx = await paused_stub.replace(missing)
    paused_stub.relayer = "nobody"
    unknown_relayer = await paused_stub.replace(created["id"])

    assert unknown_tx.status_code == 404
    assert unknown_tx.json()["error"] == f"Transaction with ID {missing} not found"
    assert unknown_relayer.status_code == 404
    assert unknown_relayer.json()["error"] == "Relayer with ID nobody not found"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"value": ...}, "missing field `value`"),
        ({"speed": ...}, "Transaction must specify either gasPrice, speed, or EIP1559 parameters"),
        ({"gas_price": 1}, "Cannot mix different transaction types"),
        ({"to": ..., "data": ...}, "Both txs `to` and `data` fields are missing"),
        ({"speed": "slow"}, "unknown variant `slow`"),
        ({"gas_limit": 20999}, "Gas limit 20999 is below the intrinsic gas 21000"),
    ],
)
async def test_a_body_a_send_would_refuse_gets_the_sends_400_and_changes_nothing(
    paused_stub: Stub, overrides: dict[str, Any], message: str
) -> None:
    created = await paused_stub.send_ok()
    sent = await paused_stub.send(**overrides)

    response = await paused_stub.replace(created["id"], **overrides)

    assert response.status_code == sent.status_code == 400
    assert response.json() == sent.json()
    assert message in response.json()["error"]
    assert await paused_stub.tx(created["id"]) == created


async def test_malformed_json_gets_the_sends_plain_text_400(paused_stub: Stub) -> None:
    created = await paused_stub.send_ok()

    response = await paused_stub.client.put(
        f"{paused_stub.tx_path}/{created['id']}", content=b"{not json", headers=paused_stub.auth
    )

    assert response.status_code == 400
    assert response.headers["content-type"].startswith("text/plain")
    assert response.text.startswith("Json deserialize error")


async def test_terms_the_signer_cannot_read_are_refused_once_it_is_signed(
    stub_factory: Any,
) -> None:
    async with stub_factory(lifecycle={"hold_at": "submitted"}) as stub:
        signed = await stub.send_ok()
        before = await stub.wait_for(signed["id"], "submitted")
        await stub.admin("PATCH", "lifecycle", {"paused": True})
        pending = await stub.send_ok()

        refused = await stub.replace(signed["id"], to="0x1234")
        taken = await stub.replace(pending["id"], to="0x1234")

        assert refused.status_code == 400
        assert refused.json()["error"] == "Invalid address: 0x1234"
        assert await stub.tx(signed["id"]) == before
        assert taken.status_code == 200  # as a send: it fails when it is signed
        await stub.admin("PATCH", "lifecycle", {"paused": False, "hold_at": None})
        failed = await stub.wait_for(pending["id"])

    assert (failed["status"], failed["status_reason"]) == ("failed", "Invalid address: 0x1234")
