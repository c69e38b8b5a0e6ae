"""The client library against the real system: relay-api and a consumer as processes, the
relayer-stub sending to a real chain (tests/conftest.py). Direct and gasless submissions reach
`confirmed` through ``wait``; replays, refusals, paging and callbacks behave as documented."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from eth_account import Account
from eth_utils import keccak

from relay_client import (
    AsyncRelayClient,
    Conflict,
    Forbidden,
    NotFound,
    RelayClient,
    RepeatedCallback,
    Unauthorized,
    ValidationFailed,
    verify_callback,
)
from relay_core import evm
from relay_testkit import new_api_key, relay_command

DEAD = "0x000000000000000000000000000000000000dEaD"


def record_call(tag: int) -> str:
    return "0x" + keccak(text="record(uint256)")[:4].hex() + f"{tag:064x}"


async def test_a_direct_submission_is_followed_to_confirmed_and_replayed_by_its_key(
    stack: Any,
) -> None:
    payee = Account.create().address

    def run() -> None:
        with RelayClient(stack.api_url, stack.api_key) as relay:
            accepted = relay.submit_direct(payee, value=123_456_789, idempotency_key="order-1")
            assert accepted.status == "pending"
            assert not accepted.replayed
            final = relay.wait(accepted.transaction_id, timeout_s=60, poll_s=0.2)
            assert final.status == "confirmed", final
            assert final.final
            assert final.hash is not None
            assert final.hash.startswith("0x")
            assert relay.status(accepted.transaction_id).hash == final.hash

            again = relay.submit_direct(payee, value=123_456_789, idempotency_key="order-1")
            assert again.replayed
            assert again.transaction_id == accepted.transaction_id
            with pytest.raises(Conflict) as conflict:
                relay.submit_direct(payee, value=1, idempotency_key="order-1")
            assert conflict.value.status == 409

    await asyncio.to_thread(run)
    rpc = evm.EvmRpc(stack.chain.rpc_url)
    try:
        assert await rpc.balance(payee) == 123_456_789
    finally:
        await rpc.aclose()


async def test_a_gasless_request_is_signed_locally_and_runs_as_its_signer(stack: Any) -> None:
    signer = Account.create()
    async with AsyncRelayClient(stack.api_url, stack.api_key) as relay:
        assert await relay.gasless_nonce(signer.address) == 0
        accepted = await relay.submit_gasless(
            signer, stack.deployment.recipient, data=record_call(7)
        )
        final = await relay.wait(accepted.transaction_id, timeout_s=60, poll_s=0.2)
        assert (final.status, final.type) == ("confirmed", "gasless"), final
        assert await relay.gasless_nonce(signer.address) == 1
        # a private key works as the signer too; the nonce is fetched afresh
        second = await relay.submit_gasless(
            signer.key.hex(), stack.deployment.recipient, data=record_call(8)
        )
        assert (await relay.wait(second.transaction_id, timeout_s=60)).status == "confirmed"


async def test_refusals_raise_with_the_apis_error_and_detail(stack: Any) -> None:
    async with AsyncRelayClient(stack.api_url, "rk_not_a_key") as stranger:
        with pytest.raises(Unauthorized):
            await stranger.status("00000000-0000-4000-8000-000000000000")
    async with AsyncRelayClient(stack.api_url, stack.api_key) as relay:
        with pytest.raises(NotFound) as missing:
            await relay.status("00000000-0000-4000-8000-000000000000")
        assert missing.value.error == "not_found"
        with pytest.raises(ValidationFailed) as invalid:
            await relay.submit_direct("0x12")
        assert [f["field"] for f in invalid.value.fields] == ["to"]
    capped = new_api_key(stack.env, "capped")
    relay_command(stack.env, "clients", "policy", "capped", "--max-value", "10")
    async with AsyncRelayClient(stack.api_url, capped) as relay:
        with pytest.raises(Forbidden) as refused:
            await relay.submit_direct(DEAD, value=11)
        assert refused.value.error == "policy_refused"
        assert "maxValueWei" in refused.value.detail


async def test_transactions_iterates_every_page_newest_first(stack: Any) -> None:
    key = new_api_key(stack.env, "pager", rate_per_s=1000, burst=1000)
    async with AsyncRelayClient(stack.api_url, key) as relay:
        ids = [(await relay.submit_direct(DEAD)).transaction_id for _ in range(5)]
        listed = [tx.transaction_id async for tx in relay.transactions(page_size=2)]
    assert listed == ids[::-1]

    def sync_listing() -> list[str]:
        with RelayClient(stack.api_url, key) as relay:
            return [tx.transaction_id for tx in relay.transactions(page_size=3)]

    assert await asyncio.to_thread(sync_listing) == ids[::-1]


async def test_wait_rides_out_a_tight_rate_limit_by_its_retry_after(stack: Any) -> None:
    # one request a second: wait's polls meet 429 and must wait as told, not fail
    key = new_api_key(stack.env, "slow", rate_per_s=1, burst=1)
    async with AsyncRelayClient(stack.api_url, key, retries=10) as relay:
        accepted = await relay.submit_direct(DEAD)
        final = await relay.wait(accepted.transaction_id, timeout_s=60, poll_s=0.1)
    assert final.status == "confirmed"


class _Receiver(BaseHTTPRequestHandler):
    received: list[tuple[dict[str, str], bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((dict(self.headers.items()), body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[tuple[dict[str, str], bytes]]]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    _Receiver.received = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", _Receiver.received
    finally:
        server.shutdown()


async def test_the_callbacks_relay_sends_verify_with_the_clients_secret(
    stack: Any, receiver: tuple[str, list[tuple[dict[str, str], bytes]]]
) -> None:
    url, received = receiver
    async with AsyncRelayClient(stack.api_url, stack.api_key) as relay:
        registered = await relay.set_callback(url, rotate_secret=True)
        assert registered.url == url
        assert registered.secret is not None
        secret = registered.secret
        accepted = await relay.submit_direct(DEAD)
        await relay.wait(accepted.transaction_id, timeout_s=60)
    for _ in range(100):
        if any(b'"confirmed"' in body for _, body in received):
            break
        await asyncio.sleep(0.1)
    callbacks = [verify_callback(secret, headers, body) for headers, body in received]
    statuses = [callback.status for callback in callbacks]
    assert statuses[-1] == "confirmed", statuses
    assert "submitted" in statuses, statuses
    assert {callback.transaction_id for callback in callbacks} == {accepted.transaction_id}
    with pytest.raises(RepeatedCallback):  # each is taken once
        verify_callback(secret, *received[-1])


async def test_a_cancel_says_what_it_did_and_the_transaction_ends_accordingly(
    stack: Any,
) -> None:
    """Sent at once after the submit, a cancel meets the transaction wherever the consumer
    has got it to: waiting (canceled at once), being sent (requested), at the executor (sent:
    a no-op, or too late if it was mined first). Whatever it met, what it says holds."""

    def run() -> list[str]:
        outcomes = []
        with RelayClient(stack.api_url, stack.api_key) as relay:
            for _ in range(3):
                accepted = relay.submit_direct(DEAD, value="1")
                try:
                    result = relay.cancel(accepted.transaction_id)
                except Conflict as exc:  # mined before the cancel arrived
                    late: str | None = exc.transaction_status
                else:
                    late = None
                if late is not None:
                    assert late in ("mined", "confirmed")
                    outcomes.append("too late")
                    continue
                assert result.transaction_id == accepted.transaction_id
                assert result.cancel in ("done", "requested", "sent")
                final = relay.wait(accepted.transaction_id, timeout_s=60, poll_s=0.2)
                if result.done:
                    assert final.status == "canceled"
                else:
                    assert final.status in ("canceled", "confirmed")
                if final.status == "canceled":  # asked again: it says so
                    again = relay.cancel(accepted.transaction_id)
                    assert (again.cancel, again.status) == ("done", "canceled")
                outcomes.append(result.cancel)
        return outcomes

    assert len(await asyncio.to_thread(run)) == 3
