"""The relayer-stub's chain mode on its own: its nonce follows the chain when someone else
uses the relayer's account, and a restart resumes what it had accepted."""

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


def send(stub: Stub, value: int) -> str:
    response = httpx.post(
        f"{stub.base_url}/api/v1/relayers/relayer-1/transactions",
        json={"to": PAYEE, "value": str(value), "data": "0x", "speed": "fast"},
        headers={"Authorization": f"Bearer {STUB_DEV_KEY}"},
        timeout=10,
    )
    response.raise_for_status()
    return str(response.json()["data"]["id"])


def final(stub: Stub, tx_id: str, timeout_s: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        data = httpx.get(
            f"{stub.base_url}/api/v1/relayers/relayer-1/transactions/{tx_id}",
            headers={"Authorization": f"Bearer {STUB_DEV_KEY}"},
            timeout=10,
        ).json()["data"]
        if data["status"] in ("confirmed", "failed"):
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
