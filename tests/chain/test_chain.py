"""Relay on a real chain (anvil, OpenZeppelin's ERC2771Forwarder, the relayer-stub signing
and broadcasting): values move, hashes are the chain's, gasless calls run as their signer in
nonce order, reverts carry their reason, and a lost or refused broadcast leaves no nonce gap."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from eth_abi import decode as abi_decode
from eth_abi import encode as abi_encode
from eth_account import Account
from eth_account.signers.local import LocalAccount
from eth_utils import keccak

from relay_core import ethereum
from relay_devstack import localchain

pytestmark = pytest.mark.timeout(180)

FINAL = {"confirmed", "failed", "expired", "canceled"}
GAS = 200_000  # the recipient's first record() writes cold storage: ~105 k


def selector(signature: str) -> str:
    return keccak(text=signature)[:4].hex()


def record_call(tag: int) -> str:
    return "0x" + selector("record(uint256)") + f"{tag:064x}"


def fail_call(reason: str) -> str:
    return "0x" + selector("fail(string)") + abi_encode(["string"], [reason]).hex()


async def read(stack: Any, signature: str, *args: tuple[str, Any]) -> Any:
    """A view call on the recipient, ``"name(types)returns"``; returns the decoded value."""
    function, _, returns = signature.partition(")")
    types = [t for t, _ in args]
    encoded = abi_encode(types, [v for _, v in args]).hex() if args else ""
    rpc = stack.rpc()
    try:
        raw = await rpc.eth_call(
            {"to": stack.deployment.recipient, "data": "0x" + selector(function + ")") + encoded}
        )
    finally:
        await rpc.aclose()
    return abi_decode([returns or "uint256"], bytes.fromhex(raw[2:]))[0]


async def wait_final(
    http: httpx.AsyncClient, transaction_id: str, timeout_s: float = 60
) -> dict[str, Any]:
    return await wait_status(http, transaction_id, lambda s: s["status"] in FINAL, timeout_s)


async def wait_cost(
    http: httpx.AsyncClient, transaction_id: str, timeout_s: float = 30
) -> dict[str, Any]:
    """The status once the consumer has read what the transaction cost from its receipt (its
    pass runs every RELAY_TRACKER_INTERVAL_S, after the status is final on a dev chain)."""
    return await wait_status(http, transaction_id, lambda s: s["feeWei"] is not None, timeout_s)


async def wait_status(
    http: httpx.AsyncClient,
    transaction_id: str,
    done: Callable[[dict[str, Any]], bool],
    timeout_s: float,
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        response = await http.get(f"/api/v1/relay/status/{transaction_id}")
        if response.status_code == 429:  # polled as a careful client: back off as told
            assert time.monotonic() < deadline, response.text
            await asyncio.sleep(float(response.headers["Retry-After"]))
            continue
        status = response.json()
        assert response.status_code == 200, status
        if done(status):
            return dict(status)
        assert time.monotonic() < deadline, status
        await asyncio.sleep(0.2)


def assert_cost_is_the_receipts(status: dict[str, Any], receipt: dict[str, Any]) -> None:
    gas_used, price = int(receipt["gasUsed"], 16), int(receipt["effectiveGasPrice"], 16)
    assert status["blockNumber"] == int(receipt["blockNumber"], 16)
    assert status["gasUsed"] == gas_used
    assert status["effectiveGasPrice"] == str(price)
    assert status["feeWei"] == str(gas_used * price)


async def domain_of(http: httpx.AsyncClient) -> ethereum.ForwarderDomain:
    served = (await http.get("/api/v1/relay/gasless/domain")).json()["domain"]
    return ethereum.ForwarderDomain(
        served["name"], served["version"], served["chainId"], served["verifyingContract"]
    )


def gasless_body(
    domain: ethereum.ForwarderDomain,
    signer: LocalAccount,
    to: str,
    nonce: int,
    data: str,
    *,
    deadline: int | None = None,
) -> dict[str, Any]:
    request = {
        "from": signer.address,
        "to": to,
        "value": "0",
        "gas": str(GAS),
        "nonce": str(nonce),
        "deadline": deadline or int(time.time()) + 3600,
        "data": data,
    }
    forward = ethereum.ForwardRequest(
        signer.address,
        to,
        0,
        GAS,
        nonce,
        request["deadline"],
        data,  # type: ignore[arg-type]
    )
    return {
        "request": request,
        "signature": ethereum.sign_forward_request(domain, forward, signer.key),
    }


async def test_a_direct_transfer_moves_the_value_and_reports_the_chains_hash(stack: Any) -> None:
    payee = Account.create().address
    async with stack.client() as http:
        accepted = await http.post(
            "/api/v1/relay/direct", json={"to": payee, "value": "123456789", "data": "0x"}
        )
        assert accepted.status_code == 202, accepted.text
        status = await wait_final(http, accepted.json()["transactionId"])
        assert status["status"] == "confirmed", status
        costed = await wait_cost(http, status["transactionId"])
    rpc = stack.rpc()
    try:
        assert await rpc.balance(payee) == 123456789
        receipt = await rpc.receipt(status["hash"])
    finally:
        await rpc.aclose()
    assert receipt is not None
    assert receipt["transactionHash"] == status["hash"]
    assert int(receipt["status"], 16) == 1
    # What it cost, as the status says, is its receipt's: a plain transfer's 21,000 gas.
    assert_cost_is_the_receipts(costed, receipt)
    assert costed["gasUsed"] == 21_000


async def test_a_gasless_request_runs_as_its_signer_through_the_forwarder(stack: Any) -> None:
    signer = Account.create()
    async with stack.client() as http:
        domain = await domain_of(http)
        assert domain.verifying_contract == stack.deployment.forwarder
        nonce = (await http.get(f"/api/v1/relay/gasless/nonce/{signer.address}")).json()
        assert nonce == {"address": signer.address, "nonce": "0"}
        body = gasless_body(domain, signer, stack.deployment.recipient, 0, record_call(42))
        accepted = await http.post("/api/v1/relay/gasless", json=body)
        assert accepted.status_code == 202, accepted.text
        status = await wait_final(http, accepted.json()["transactionId"])
        assert status["status"] == "confirmed", status
        after = (await http.get(f"/api/v1/relay/gasless/nonce/{signer.address}")).json()
    assert after["nonce"] == "1"
    assert (await read(stack, "lastSender()address")).lower() == signer.address.lower()
    assert await read(stack, "callsBy(address)", ("address", signer.address)) == 1


async def test_bad_gasless_requests_are_refused_at_the_api_and_never_reach_the_chain(
    stack: Any,
) -> None:
    signer = Account.create()
    recipient = stack.deployment.recipient
    async with stack.client() as http:
        domain = await domain_of(http)
        wrong_chain = ethereum.ForwarderDomain(
            domain.name, domain.version, 1, domain.verifying_contract
        )
        wrong_contract = ethereum.ForwarderDomain(
            domain.name, domain.version, domain.chain_id, stack.deployment.recipient
        )
        tampered = gasless_body(domain, signer, recipient, 0, record_call(1))
        tampered["request"]["data"] = record_call(2)  # signed one thing, sent another
        cases = {
            "wrong chain id": gasless_body(wrong_chain, signer, recipient, 0, record_call(1)),
            "wrong verifying contract": gasless_body(
                wrong_contract, signer, recipient, 0, record_call(1)
            ),
            "expired deadline": gasless_body(
                domain, signer, recipient, 0, record_call(1), deadline=int(time.time()) - 10
            ),
            "tampered field": tampered,
        }
        for case, body in cases.items():
            response = await http.post("/api/v1/relay/gasless", json=body)
            assert response.status_code == 400, (case, response.text)
    assert stack.stub.ledger_count() == 0
    assert await read(stack, "callsBy(address)", ("address", signer.address)) == 0


async def test_twenty_requests_from_one_signer_confirm_in_nonce_order_however_delivered(
    stack: Any,
) -> None:
    signer = Account.create()
    before = await read(stack, "count()")
    async with stack.client() as http:
        domain = await domain_of(http)
        bodies = [
            gasless_body(domain, signer, stack.deployment.recipient, n, record_call(n))
            for n in range(20)
        ]
        order = list(range(20))
        random.shuffle(order)  # accepted, hence enqueued and delivered, in a random order
        responses = await asyncio.gather(
            *(http.post("/api/v1/relay/gasless", json=bodies[n]) for n in order)
        )
        assert all(r.status_code == 202 for r in responses), [r.text for r in responses]
        statuses = await asyncio.gather(
            *(wait_final(http, r.json()["transactionId"], 120) for r in responses)
        )
        assert {s["status"] for s in statuses} == {"confirmed"}, statuses
        # The chain ran them in nonce order: the recipient logged tags 0..19 one after another.
        tags = [await read(stack, "tags(uint256)", ("uint256", before + i)) for i in range(20)]
        assert tags == list(range(20))
        # A nonce already used is refused at once.
        reused = gasless_body(domain, signer, stack.deployment.recipient, 5, record_call(99))
        refused = await http.post("/api/v1/relay/gasless", json=reused)
        assert refused.status_code == 400, refused.text
        assert "already used" in refused.json()["detail"]
    assert stack.stub.ledger_count() == 20


async def test_a_reverting_call_fails_with_the_revert_reason(stack: Any) -> None:
    async with stack.client() as http:
        accepted = await http.post(
            "/api/v1/relay/direct",
            json={"to": stack.deployment.recipient, "data": fail_call("out of stock")},
        )
        assert accepted.status_code == 202, accepted.text
        status = await wait_final(http, accepted.json()["transactionId"])
        assert status["status"] == "failed", status
        costed = await wait_cost(http, status["transactionId"])
    assert status["errorMessage"] == "execution reverted: out of stock"
    rpc = stack.rpc()
    try:
        receipt = await rpc.receipt(status["hash"])
    finally:
        await rpc.aclose()
    assert receipt is not None
    assert int(receipt["status"], 16) == 0
    assert_cost_is_the_receipts(costed, receipt)  # a reverted call paid for its gas too


async def test_a_lost_and_a_refused_broadcast_leave_no_nonce_gap(stack: Any) -> None:
    # The first broadcast is lost on the way; the next is refused by the node, every try.
    stack.stub.faults(broadcast_drop_next=1, broadcast_reject_next=3)
    async with stack.client() as http:
        ids = []
        for n in range(6):
            accepted = await http.post(
                "/api/v1/relay/direct",
                json={"to": stack.deployment.recipient, "data": record_call(1000 + n)},
            )
            assert accepted.status_code == 202, accepted.text
            ids.append(accepted.json()["transactionId"])
            await asyncio.sleep(0.3)  # one at a time, so the faults hit the first two
        statuses = [await wait_final(http, i, 90) for i in ids]
    assert [s["status"] for s in statuses].count("confirmed") == 5, statuses
    refused = [s for s in statuses if s["status"] == "failed"]
    assert len(refused) == 1, statuses
    assert "the node refused it" in refused[0]["errorMessage"]
    # The nonces the relayer used are consecutive, and every one is on chain: nothing is
    # pending behind a gap.
    nonces = sorted(e["nonce"] for e in stack.stub.ledger()[1] if e["nonce"] is not None)
    assert len(nonces) == 5
    assert nonces == list(range(nonces[0], nonces[0] + 5))
    relayer = localchain.dev_account(localchain.RELAYER_ACCOUNT).address
    rpc = stack.rpc()
    try:
        assert await rpc.nonce(relayer, "latest") == await rpc.nonce(relayer, "pending")
    finally:
        await rpc.aclose()


async def test_a_sped_up_transaction_is_mined_at_its_new_hash_and_executed_once(
    stack: Any,
) -> None:
    """With the node holding its mempool (no automine), a submitted transfer is sped up: the
    executor replaces it at its nonce, and the block mines the replacement, not both."""
    payee = Account.create().address
    rpc = stack.rpc()
    await rpc.call("evm_setAutomine", False)
    await rpc.call("evm_setIntervalMining", 0)
    try:
        async with stack.client() as http:
            accepted = await http.post(
                "/api/v1/relay/direct",
                json={"to": payee, "value": "111", "data": "0x", "speed": "average"},
            )
            assert accepted.status_code == 202, accepted.text
            tx_id = accepted.json()["transactionId"]
            sent = await wait_status(
                http, tx_id, lambda s: s["status"] == "submitted" and bool(s["hash"]), 30
            )
            sped = await http.post(
                f"/api/v1/relay/transactions/{tx_id}/speed-up", json={"speed": "fastest"}
            )
            assert sped.status_code == 200, sped.text
            assert sped.json()["speedUp"] == "sent"
            new_hash = sped.json()["hash"]
            assert new_hash not in (None, sent["hash"])
            await rpc.call("evm_mine")
            final = await wait_final(http, tx_id)
        assert (final["status"], final["hash"]) == ("confirmed", new_hash), final
        receipt = await rpc.receipt(new_hash)
        assert receipt is not None
        assert int(receipt["status"], 16) == 1
        assert await rpc.receipt(sent["hash"]) is None  # the original was never mined
        assert await rpc.balance(payee) == 111  # executed once
    finally:
        await rpc.call("evm_setAutomine", True)
        await rpc.aclose()
