"""The timed lifecycle: pending -> sent -> submitted -> mined -> confirmed | failed, cancel,
the EVM no-op on expiry, retention, pause and hold."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from stub_testkit import DEAD, Stub

NOOP_REASON = "Transaction is expired. Replacing with NOOP."
HASH = re.compile(r"^0x[0-9a-f]{64}$")
OTHER = "0x1111111111111111111111111111111111111111"


async def test_a_transaction_walks_to_confirmed_with_hash_nonce_price_and_timestamps(
    stub: Stub,
) -> None:
    created = await stub.send_ok()

    tx = await stub.wait_for(created["id"], "confirmed")

    assert HASH.match(tx["hash"])
    assert tx["nonce"] == 0
    assert tx["gas_price"] == "1500000000"  # fast: 1.5 x the 1 gwei base
    assert tx["status_reason"] is None
    assert tx["signature"] is not None
    sent_at = datetime.fromisoformat(tx["sent_at"])
    confirmed_at = datetime.fromisoformat(tx["confirmed_at"])
    assert datetime.fromisoformat(tx["created_at"]) <= sent_at <= confirmed_at
    assert (await stub.ledger())["entries"][0]["status"] == "confirmed"


async def test_the_lifecycle_passes_through_every_upstream_status_in_order(
    stub_factory: Any,
) -> None:
    delays = {
        "delay_sent_ms": 60,
        "delay_submitted_ms": 60,
        "delay_mined_ms": 60,
        "delay_confirmed_ms": 60,
    }
    async with stub_factory(lifecycle=delays) as stub:
        created = await stub.send_ok()
        seen = [created["status"]]
        while seen[-1] != "confirmed":
            status = (await stub.tx(created["id"]))["status"]
            if status != seen[-1]:
                seen.append(status)
            await asyncio.sleep(0.005)

    assert seen == ["pending", "sent", "submitted", "mined", "confirmed"]


async def test_nonces_are_assigned_in_order_per_relayer(stub_factory: Any) -> None:
    async with stub_factory(relayer_ids="relayer-1,relayer-2") as stub:
        first = [(await stub.send_ok())["id"] for _ in range(3)]
        stub.relayer = "relayer-2"
        other = await stub.send_ok()
        nonces = [(await stub.wait_for(tx_id, "confirmed"))["nonce"] for tx_id in first]
        other_nonce = (await stub.wait_for(other["id"], "confirmed"))["nonce"]

    assert nonces == [0, 1, 2]
    assert other_nonce == 0


async def test_a_send_to_a_fail_to_address_ends_failed_with_a_reason(stub_factory: Any) -> None:
    async with stub_factory(lifecycle={"fail_to": [OTHER.upper().replace("0X", "0x")]}) as stub:
        doomed = await stub.send_ok(to=OTHER)
        fine = await stub.send_ok()

        failed = await stub.wait_for(doomed["id"])
        confirmed = await stub.wait_for(fine["id"])

    assert failed["status"] == "failed"
    assert failed["status_reason"]
    assert HASH.match(failed["hash"])  # it was broadcast, then reverted
    assert confirmed["status"] == "confirmed"


async def test_calldata_carrying_the_failure_marker_ends_failed(stub_factory: Any) -> None:
    async with stub_factory(lifecycle={"fail_data_marker": "0xDEADBEEF"}) as stub:
        doomed = await stub.send_ok(data="0x12deadbeef34", gas_limit=100_000)
        fine = await stub.send_ok(data="0x1234", gas_limit=100_000)

        assert (await stub.wait_for(doomed["id"]))["status"] == "failed"
        assert (await stub.wait_for(fine["id"]))["status"] == "confirmed"


async def test_a_failure_rate_of_one_fails_every_transaction(stub_factory: Any) -> None:
    async with stub_factory(lifecycle={"failure_rate": 1.0}) as stub:
        ids = [(await stub.send_ok())["id"] for _ in range(5)]
        statuses = {(await stub.wait_for(tx_id))["status"] for tx_id in ids}

    assert statuses == {"failed"}


async def test_a_seeded_failure_rate_fails_the_same_transactions_each_run(
    stub_factory: Any,
) -> None:
    outcomes = []
    for _ in range(2):
        async with stub_factory(
            lifecycle={"failure_rate": 0.5, "seed": 42}, ledger_path=":memory:"
        ) as stub:
            ids = [(await stub.send_ok())["id"] for _ in range(20)]
            outcomes.append([(await stub.wait_for(tx_id))["status"] for tx_id in ids])

    assert outcomes[0] == outcomes[1]
    assert {"failed", "confirmed"} == set(outcomes[0])


async def test_a_paused_lifecycle_holds_transactions_in_pending_until_resumed(
    paused_stub: Stub,
) -> None:
    created = await paused_stub.send_ok()
    await asyncio.sleep(0.2)
    assert (await paused_stub.tx(created["id"]))["status"] == "pending"

    await paused_stub.admin("PATCH", "lifecycle", {"paused": False})

    assert (await paused_stub.wait_for(created["id"]))["status"] == "confirmed"


async def test_hold_at_submitted_keeps_transactions_submitted_until_released(
    stub_factory: Any,
) -> None:
    async with stub_factory(lifecycle={"hold_at": "submitted"}) as stub:
        created = await stub.send_ok()
        held = await stub.wait_for(created["id"], "submitted")
        await asyncio.sleep(0.15)
        assert (await stub.tx(created["id"]))["status"] == "submitted"
        assert held["sent_at"] is not None

        await stub.admin("PATCH", "lifecycle", {"hold_at": None})

        assert (await stub.wait_for(created["id"]))["status"] == "confirmed"


async def test_canceling_a_pending_transaction_cancels_it_at_once(paused_stub: Stub) -> None:
    created = await paused_stub.send_ok()

    response = await paused_stub.client.delete(
        f"{paused_stub.tx_path}/{created['id']}", headers=paused_stub.auth
    )

    assert response.status_code == 200
    assert response.json()["data"]["status"] == "canceled"
    assert (await paused_stub.tx(created["id"]))["status"] == "canceled"


async def test_canceling_a_submitted_transaction_replaces_it_with_a_noop_that_ends_canceled(
    stub_factory: Any,
) -> None:
    async with stub_factory(lifecycle={"hold_at": "submitted"}) as stub:
        created = await stub.send_ok(value="5")
        before = await stub.wait_for(created["id"], "submitted")

        response = await stub.client.delete(f"{stub.tx_path}/{created['id']}", headers=stub.auth)

        assert response.status_code == 200
        canceled = response.json()["data"]
        assert canceled["status"] == "submitted"
        assert canceled["is_canceled"] is True
        assert canceled["to"] == canceled["from"]
        assert canceled["data"] == "0x"
        assert canceled["value"] == "0x0"
        assert canceled["nonce"] == before["nonce"]
        assert canceled["hash"] != before["hash"]
        listed = await stub.client.get(
            stub.tx_path, params={"status": "submitted"}, headers=stub.auth
        )
        assert listed.json()["data"] == []  # non-final filter leaves canceled ones out

        await stub.admin("PATCH", "lifecycle", {"hold_at": None})
        final = await stub.wait_for(created["id"])

    assert final["status"] == "canceled"


async def test_canceling_a_final_transaction_is_refused_with_400(stub: Stub) -> None:
    created = await stub.send_ok()
    await stub.wait_for(created["id"], "confirmed")

    response = await stub.client.delete(f"{stub.tx_path}/{created['id']}", headers=stub.auth)

    assert response.status_code == 400
    assert response.json()["error"] == (
        "Invalid transaction state for cancel_transaction. Current: Confirmed, "
        "Expected one of: [Pending, Sent, Submitted]"
    )


async def test_expiry_while_submitted_replaces_it_with_a_noop_that_ends_confirmed(
    stub_factory: Any,
) -> None:
    async with stub_factory(lifecycle={"hold_at": "submitted"}) as stub:
        created = await stub.send_ok(data="0xabcdef", gas_limit=100_000)
        await stub.wait_for(created["id"], "submitted")

        expired = await stub.admin("POST", f"transactions/{created['id']}/expire")

        assert expired["status"] == "submitted"
        assert expired["status_reason"] == NOOP_REASON
        assert expired["is_canceled"] is False
        await stub.admin("PATCH", "lifecycle", {"hold_at": None})
        final = await stub.wait_for(created["id"])

    assert final["status"] == "confirmed"  # not expired, not failed: the no-op confirmed
    assert final["to"] == final["from"]
    assert final["data"] == "0x"
    assert final["value"] == "0x0"
    assert final["status_reason"] == NOOP_REASON


async def test_valid_until_passing_while_submitted_triggers_the_noop_by_itself(
    stub_factory: Any,
) -> None:
    async with stub_factory(lifecycle={"hold_at": "submitted"}) as stub:
        valid_until = (datetime.now(UTC) + timedelta(seconds=0.4)).isoformat()
        created = await stub.send_ok(valid_until=valid_until)
        await stub.wait_for(created["id"], "submitted")
        assert (await stub.tx(created["id"]))["to"] == DEAD

        await asyncio.sleep(0.6)
        tx = await stub.tx(created["id"])

    assert tx["status_reason"] == NOOP_REASON
    assert tx["to"] == tx["from"]


async def test_a_transaction_still_pending_when_valid_until_passes_fails(
    paused_stub: Stub,
) -> None:
    valid_until = (datetime.now(UTC) + timedelta(seconds=0.2)).isoformat()
    created = await paused_stub.send_ok(valid_until=valid_until)
    await asyncio.sleep(0.3)

    await paused_stub.admin("PATCH", "lifecycle", {"paused": False})
    final = await paused_stub.wait_for(created["id"])

    assert final["status"] == "failed"
    assert "expired" in final["status_reason"]
    assert final["nonce"] is None


async def test_a_malformed_to_is_accepted_then_fails_when_signed(stub: Stub) -> None:
    created = await stub.send_ok(to="0x1234")

    final = await stub.wait_for(created["id"])

    assert final["status"] == "failed"
    assert final["status_reason"] == "Invalid address: 0x1234"


async def test_final_transactions_are_deleted_after_retention_but_stay_in_the_ledger(
    stub_factory: Any,
) -> None:
    async with stub_factory(retention_s=0.3) as stub:
        created = await stub.send_ok()
        await stub.wait_for(created["id"], "confirmed")
        await asyncio.sleep(0.1)
        assert (await stub.get(created["id"])).status_code == 200

        await asyncio.sleep(0.4)
        gone = await stub.get(created["id"])
        ledger = await stub.ledger()

    assert gone.status_code == 404
    assert ledger["count"] == 1
    assert ledger["entries"][0]["purged"] is True
    assert ledger["entries"][0]["status"] == "confirmed"


async def test_transactions_in_flight_are_not_deleted_by_retention(stub_factory: Any) -> None:
    async with stub_factory(retention_s=0.0, lifecycle={"paused": True}) as stub:
        created = await stub.send_ok()
        await asyncio.sleep(0.2)

        assert (await stub.get(created["id"])).status_code == 200
