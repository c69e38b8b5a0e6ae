"""Replace in chain mode, on anvil: the replacement is signed at the same nonce, outbids the
version in the node's pool and is the one mined; when the original was mined first, the chain
decided and the transaction ends as the original; a jam still holds a replaced transaction.

Each test runs its own anvil (``make chain`` installs it) and a stub in-process."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from relay_core import evm
from relay_devstack import localchain

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def chain(tmp_path: Path) -> Iterator[localchain.LocalChain]:
    started = localchain.start(log_path=tmp_path / "anvil.log")
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
async def rpc(chain: localchain.LocalChain) -> AsyncIterator[evm.EvmRpc]:
    client = evm.EvmRpc(chain.rpc_url)
    try:
        yield client
    finally:
        await client.aclose()


def new_payee() -> str:
    """An address no one has paid yet: its balance is what the test sent it."""
    return "0x" + os.urandom(20).hex()


async def wait_until(check: Any, what: str, timeout_s: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        found = await check()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def stop_mining(rpc: evm.EvmRpc) -> None:
    await rpc.call("evm_setAutomine", False)
    await rpc.call("evm_setIntervalMining", 0)


async def test_a_replaced_transfer_is_mined_at_the_same_nonce_with_the_new_value(
    stub_factory: Any, chain: localchain.LocalChain, rpc: evm.EvmRpc
) -> None:
    payee = new_payee()
    async with stub_factory(chain_rpc_url=chain.rpc_url, chain_poll_interval_s=0.05) as stub:
        await stop_mining(rpc)
        created = await stub.send_ok(to=payee, value="1000", speed="fast")
        relayer = created["from"]
        nonce_before = await rpc.nonce(relayer, "latest")
        original = await stub.wait_for(created["id"], "submitted", timeout_s=15)
        assert original["nonce"] == nonce_before

        response = await stub.replace(created["id"], to=payee, value="2000", speed="fastest")
        assert response.status_code == 200, response.text
        replacement = response.json()["data"]
        assert (replacement["id"], replacement["nonce"]) == (created["id"], original["nonce"])
        assert replacement["hash"] != original["hash"]
        assert (replacement["value"], replacement["speed"]) == ("0x7d0", "fastest")
        assert int(replacement["gas_price"]) >= int(original["gas_price"]) * 11 // 10
        in_pool = await wait_until(
            lambda: rpc.transaction(replacement["hash"]), "the node to have the replacement"
        )
        assert int(in_pool["gasPrice"], 16) == int(replacement["gas_price"])

        await rpc.call("evm_mine")
        final = await stub.wait_for(created["id"], "confirmed", timeout_s=15)

        receipt = await rpc.receipt(replacement["hash"])
        assert receipt is not None
        assert int(receipt["status"], 16) == 1
        assert await rpc.receipt(original["hash"]) is None
        assert await rpc.balance(payee) == 2000
        assert await rpc.nonce(relayer, "latest") == nonce_before + 1
        assert (final["hash"], final["value"], final["nonce"]) == (
            replacement["hash"],
            "0x7d0",
            nonce_before,
        )


async def test_when_the_original_was_mined_first_the_transaction_ends_as_the_original(
    stub_factory: Any, chain: localchain.LocalChain, rpc: evm.EvmRpc
) -> None:
    # The watcher looks at the chain only every 10 s: the original is mined, and the replace
    # made, while the stub still has it as submitted (the node then refuses the replacement).
    payee = new_payee()
    await stop_mining(rpc)
    async with stub_factory(chain_rpc_url=chain.rpc_url, chain_poll_interval_s=10) as stub:
        created = await stub.send_ok(to=payee, value="1000", speed="fast")
        original = await stub.wait_for(created["id"], "submitted", timeout_s=5)
        await rpc.call("evm_mine")
        assert await rpc.receipt(original["hash"]) is not None

        response = await stub.replace(created["id"], to=payee, value="2000", speed="fastest")
        assert response.status_code == 200, response.text
        assert response.json()["data"]["hash"] != original["hash"]
        final = await stub.wait_for(created["id"], "confirmed", timeout_s=30)

    assert await rpc.balance(payee) == 1000
    assert final["hash"] == original["hash"]
    for name in ("to", "value", "gas_price", "speed", "signature", "gas_limit", "nonce"):
        assert final[name] == original[name], name


async def test_a_replace_does_not_get_a_jammed_relayers_transaction_sent(
    stub_factory: Any, chain: localchain.LocalChain, rpc: evm.EvmRpc
) -> None:
    payee = new_payee()
    async with stub_factory(
        chain_rpc_url=chain.rpc_url,
        chain_poll_interval_s=0.05,
        faults={"jam_relayers": ["relayer-1"]},
    ) as stub:
        created = await stub.send_ok(to=payee, value="1000")
        relayer = created["from"]
        nonce_before = await rpc.nonce(relayer, "pending")

        replacement = (
            await stub.replace(created["id"], to=payee, value="3000", speed="fastest")
        ).json()["data"]
        await asyncio.sleep(0.5)
        held = await stub.tx(created["id"])

        assert (replacement["status"], replacement["value"]) == ("pending", "0xbb8")
        assert (held["status"], held["nonce"], held["hash"]) == ("pending", None, None)
        assert await rpc.nonce(relayer, "pending") == nonce_before
        await stub.admin("PATCH", "faults", {"jam_relayers": []})
        final = await stub.wait_for(created["id"], "confirmed", timeout_s=15)

    assert (final["value"], final["speed"], final["nonce"]) == ("0xbb8", "fastest", nonce_before)
    assert await rpc.balance(payee) == 3000
