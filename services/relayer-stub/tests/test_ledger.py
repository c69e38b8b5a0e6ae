"""The durable ledger: committed before the answer, filterable, survives restarts, resettable."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from stub_testkit import DEAD, FAST_LIFECYCLE, Stub

OTHER = "0x3333333333333333333333333333333333333333"


async def test_a_send_is_in_the_ledger_file_before_the_answer_leaves(
    stub: Stub, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = stub.runtime.ledger
    write = ledger._flush

    def slow_write(*args: Any) -> None:
        time.sleep(0.3)  # the writer thread takes its time; the answer must wait for it
        write(*args)

    monkeypatch.setattr(ledger, "_flush", slow_write)
    started = time.monotonic()
    created = await stub.send_ok()
    elapsed = time.monotonic() - started

    with sqlite3.connect(stub.settings.ledger_path) as other_reader:
        rows = other_reader.execute("SELECT id, to_address FROM ledger").fetchall()
    assert rows == [(created["id"], DEAD)]
    assert elapsed >= 0.3


async def test_ledger_entries_carry_the_request_and_the_live_status(paused_stub: Stub) -> None:
    created = await paused_stub.send_ok(value="0x10", data="0xABCD", gas_limit=30_000)

    entry = (await paused_stub.ledger())["entries"][0]

    assert entry["id"] == created["id"]
    assert entry["seq"] == 1
    assert entry["relayer_id"] == "relayer-1"
    assert entry["to"] == DEAD
    assert entry["data"] == "0xabcd"
    assert entry["value"] == "16"
    assert entry["status"] == "pending"
    assert entry["hung"] is False
    assert entry["purged"] is False
    assert entry["request"]["data"] == "0xABCD"
    assert entry["request"]["gas_limit"] == 30_000


async def test_the_ledger_filters_by_to_case_insensitively_and_by_normalized_data(
    paused_stub: Stub,
) -> None:
    await paused_stub.send_ok(to=OTHER, data="0xAA", gas_limit=30_000)
    await paused_stub.send_ok(to=OTHER, data="0xbb", gas_limit=30_000)
    await paused_stub.send_ok(to=DEAD, data="0xaa", gas_limit=30_000)

    by_to = await paused_stub.ledger(to=OTHER.upper().replace("0X", "0x"))
    by_data = await paused_stub.ledger(data="AA")
    by_both = await paused_stub.ledger(to=OTHER, data="0xaa")
    page = await paused_stub.ledger(limit=1, offset=1)

    assert by_to["count"] == 2
    assert by_data["count"] == 2
    assert by_both["count"] == 1
    assert page["count"] == 3
    assert [entry["seq"] for entry in page["entries"]] == [2]


async def test_the_ledger_and_live_state_survive_a_restart(stub_factory: Any) -> None:
    async with stub_factory() as first:
        done = await first.send_ok()
        await first.wait_for(done["id"], "confirmed")
        await first.admin("PUT", "lifecycle", {"paused": True})
        waiting = await first.send_ok()

    async with stub_factory() as second:
        ledger = await second.ledger()
        restored_done = await second.tx(done["id"])
        resumed = await second.wait_for(waiting["id"], "confirmed")
        newcomer = await second.wait_for((await second.send_ok())["id"], "confirmed")

    assert ledger["count"] == 2
    assert restored_done["status"] == "confirmed"
    assert restored_done["nonce"] == 0
    assert resumed["nonce"] == 1
    assert newcomer["nonce"] == 2  # the nonce counter carried over, no reuse


async def test_reset_empties_ledger_and_memory_and_restores_the_configured_knobs(
    stub_factory: Any,
) -> None:
    async with stub_factory(lifecycle={"paused": True}) as stub:
        created = await stub.send_ok()
        await stub.admin("PUT", "faults", {"error_rate": 1.0})
        await stub.admin("PUT", "lifecycle", dict(FAST_LIFECYCLE))

        await stub.admin("POST", "reset")

        assert (await stub.ledger())["count"] == 0
        assert (await stub.get(created["id"])).status_code == 404
        assert (await stub.admin("GET", "faults"))["config"]["error_rate"] == 0
        assert (await stub.admin("GET", "lifecycle"))["config"]["paused"] is True
        again = await stub.send_ok()
        assert (await stub.ledger())["entries"][0]["seq"] == 1
        assert again["id"] != created["id"]


async def test_an_admin_token_when_configured_guards_the_admin_api(stub_factory: Any) -> None:
    token = "admin-token-0123456789-0123456789"
    async with stub_factory(admin_token=token) as stub:
        refused = await stub.client.get("/__admin/ledger")
        wrong_key = await stub.client.get("/__admin/ledger", headers=stub.auth)
        allowed = await stub.client.get(
            "/__admin/ledger", headers={"Authorization": f"Bearer {token}"}
        )

    assert refused.status_code == 401
    assert wrong_key.status_code == 401
    assert allowed.status_code == 200


async def test_an_in_memory_ledger_works_for_throwaway_runs(
    stub_factory: Any, tmp_path: Path
) -> None:
    async with stub_factory(ledger_path=":memory:") as stub:
        await stub.send_ok()
        assert (await stub.ledger())["count"] == 1

    assert not (tmp_path / "ledger.sqlite3").exists()
