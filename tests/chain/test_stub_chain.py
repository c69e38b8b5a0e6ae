"""The relayer-stub's chain mode on its own: its nonce follows the chain when someone else
uses the relayer's account, a restart resumes what it had accepted, and a pool of relayers
sends from as many accounts, each with its own nonces, one of them jammed at will."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from eth_utils import to_checksum_address

from relay_core import evm
from relay_devstack import localchain
from relay_testkit import STUB_DEV_KEY, Stub, start_stub

pytestmark = pytest.mark.timeout(120)

PAYEE = "0x00000000000000000000000000000000000be5e7"  # any case, as upstream takes it


def send(stub: Stub, value: int, relayer: str = "relayer-1") -> str:
    response = httpx.post(
        f"{stub.base_url}/api/v1/relayers/{relayer}/transactions",
        json={"to": PAYEE, "value": str(value), "data": "0x", "speed": "fast"},
        headers={"Authorization": f"Bearer {STUB_DEV_KEY}"},
        timeout=10,
    )
    response.raise_for_status()
    return str(response.json()["data"]["id"])


def get(stub: Stub, path: str) -> Any:
    response = httpx.get(
        f"{stub.base_url}/api/v1/relayers/{path}",
        headers={"Authorization": f"Bearer {STUB_DEV_KEY}"},
        timeout=10,
    )
    response.raise_for_status()
    return response.json()["data"]


def final(
    stub: Stub,
    tx_id: str,
    timeout_s: float = 30,
    statuses: tuple[str, ...] = ("confirmed", "failed"),
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        data = get(stub, f"relayer-1/transactions/{tx_id}")  # found by id, whatever relayer
        if data["status"] in statuses:
            return dict(data)
        assert time.monotonic() < deadline, data
        time.sleep(0.1)


@pytest.fixture
def stub(anvil: localchain.LocalChain, tmp_path: Path) -> Any:
    started = start_stub(
        tmp_path, STUB_CHAIN_RPC_URL=anvil.rpc_url, STUB_CHAIN_POLL_INTERVAL_S="0.05"
    )
    yield started
    started.kill()


async def test_a_nonce_used_outside_the_stub_does_not_jam_it(
    anvil: localchain.LocalChain, stub: Stub
) -> None:
    assert final(stub, send(stub, 1))["status"] == "confirmed"
    # Someone else sends from the relayer's account: the stub's next nonce is now taken.
    relayer = localchain.dev_account(localchain.RELAYER_ACCOUNT)
    rpc = evm.EvmRpc(anvil.rpc_url)
    try:
        nonce = await rpc.nonce(relayer.address)
        signed = relayer.sign_transaction(
            {
                "nonce": nonce,
                "gas": 21_000,
                "gasPrice": await rpc.gas_price() * 2,
                "to": to_checksum_address(PAYEE),
                "value": 7,
                "data": b"",
                "chainId": localchain.DEV_CHAIN_ID,
            }
        )
        await rpc.send_raw("0x" + signed.raw_transaction.hex().removeprefix("0x"))
        results = [final(stub, send(stub, v)) for v in (2, 3)]
        assert [r["status"] for r in results] == ["confirmed", "confirmed"]
        assert [r["nonce"] for r in results] == [nonce + 1, nonce + 2]
        assert await rpc.nonce(relayer.address, "latest") == nonce + 3
        # Receipts in one JSON-RPC batch, in order; a hash the chain does not know: None.
        unknown = "0x" + "ab" * 32
        receipts = await rpc.receipts([results[1]["hash"], unknown, results[0]["hash"]])
        assert receipts[1] is None
        assert [r["transactionHash"] for r in (receipts[0], receipts[2])] == [
            results[1]["hash"],
            results[0]["hash"],
        ]
        assert receipts == [
            await rpc.receipt(h) for h in (results[1]["hash"], unknown, results[0]["hash"])
        ]
    finally:
        await rpc.aclose()


def test_a_restarted_stub_sends_what_it_had_accepted(stub: Stub) -> None:
    stub.lifecycle(paused=True)  # accepted and recorded, not sent
    ids = [send(stub, v) for v in (10, 11, 12)]
    stub.kill()
    stub.env["STUB_LIFECYCLE__PAUSED"] = "false"
    stub.start()  # the same port and ledger
    results = [final(stub, tx_id) for tx_id in ids]
    assert [r["status"] for r in results] == ["confirmed"] * 3
    nonces = [r["nonce"] for r in results]
    assert nonces == list(range(nonces[0], nonces[0] + 3))


POOL = ["relayer-1", "relayer-2", "relayer-3"]


@pytest.fixture
def own_chain(tmp_path: Path) -> Any:
    """A chain of its own: every relayer's account starts at nonce 0."""
    chain = localchain.start(log_path=tmp_path / "anvil.log")
    yield chain
    chain.stop()


@pytest.fixture
def pool(own_chain: localchain.LocalChain, tmp_path: Path) -> Any:
    started = start_stub(
        tmp_path,
        STUB_CHAIN_RPC_URL=own_chain.rpc_url,
        STUB_CHAIN_POLL_INTERVAL_S="0.05",
        STUB_RELAYER_IDS=",".join(POOL),
    )
    yield started
    started.kill()


def patch_faults(stub: Stub, **fields: Any) -> None:
    httpx.patch(f"{stub.base_url}/__admin/faults", json=fields, timeout=10).raise_for_status()


async def test_a_pool_of_relayers_sends_from_as_many_accounts_each_jammed_at_will(
    own_chain: localchain.LocalChain, pool: Stub
) -> None:
    accounts = {
        rid: localchain.dev_account(localchain.relayer_account(position)).address
        for position, rid in enumerate(POOL)
    }
    rpc = evm.EvmRpc(own_chain.rpc_url)
    try:
        # Interleaved sends: each relayer's go out from its own account, nonces 0, 1, 2.
        ids: dict[str, list[str]] = {rid: [] for rid in POOL}
        for value in (1, 2, 3):
            for rid in POOL:
                ids[rid].append(send(pool, value, rid))
        for rid in POOL:
            results = [final(pool, tx_id) for tx_id in ids[rid]]
            assert [r["status"] for r in results] == ["confirmed"] * 3
            assert {r["from"] for r in results} == {accounts[rid]}
            assert [r["nonce"] for r in results] == [0, 1, 2]
            for result in results:
                mined = await rpc.transaction(result["hash"])
                assert mined is not None
                assert to_checksum_address(mined["from"]) == accounts[rid]
                assert int(mined["nonce"], 16) == result["nonce"]
            assert await rpc.nonce(accounts[rid], "latest") == 3
        assert len(set(accounts.values())) == 3

        # The balance is the node's; an override simulates an empty wallet.
        for rid in POOL:
            on_chain = await rpc.balance(accounts[rid])
            assert get(pool, f"{rid}/balance") == {"balance": on_chain, "unit": "wei"}
            assert get(pool, f"{rid}/status")["balance"] == str(on_chain)
        patch_faults(pool, relayer_balances={"relayer-2": 0})
        assert get(pool, "relayer-2/balance")["balance"] == 0
        assert get(pool, "relayer-2/status")["balance"] == "0"
        patch_faults(pool, relayer_balances={})

        # relayer-2 jammed: its sends are accepted and stay pending, unsigned and unsent.
        patch_faults(pool, jam_relayers=["relayer-2"])
        held = [send(pool, v, "relayer-2") for v in (4, 5)]
        free = [send(pool, 6, "relayer-1"), send(pool, 7, "relayer-3")]
        assert [final(pool, tx_id)["status"] for tx_id in free] == ["confirmed"] * 2
        time.sleep(0.5)
        waiting = [get(pool, f"relayer-2/transactions/{tx_id}") for tx_id in held]
        assert [(w["status"], w["nonce"], w["hash"]) for w in waiting] == [
            ("pending", None, None)
        ] * 2
        assert await rpc.nonce(accounts["relayer-2"], "pending") == 3
        assert get(pool, "relayer-2/status")["pending_transactions_count"] == 2
        stats = httpx.get(f"{pool.base_url}/__admin/stats", timeout=10).json()
        assert stats["jammed_relayers"] == {"relayer-2": 2}

        # Lifted: the sender wakes at once, and the nonces carry on without a gap.
        lifted = time.monotonic()
        patch_faults(pool, jam_relayers=[])
        final(pool, held[0], timeout_s=2, statuses=("submitted", "mined", "confirmed"))
        assert time.monotonic() - lifted < 2
        results = [final(pool, tx_id) for tx_id in held]
        assert [(r["status"], r["nonce"]) for r in results] == [("confirmed", 3), ("confirmed", 4)]
        assert await rpc.nonce(accounts["relayer-2"], "latest") == 5
    finally:
        await rpc.aclose()
