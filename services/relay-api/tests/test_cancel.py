"""DELETE /api/v1/relay/transactions/{id}: a client's cancel, decided against the consumer's
claim by the row's version (one of them wins, every time), handed to the executor once it
has the transaction, refused once it is mined."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
from api_testkit import DEAD, accept_direct, row_of, set_row
from sqlalchemy import select

from relay_api.app import create_app
from relay_api.runtime import Runtime
from relay_core.db.models import Notification, Transaction, TransactionEvent, utcnow
from relay_core.db.transitions import transition
from relay_core.executor import ExecutorClient
from relay_core.statuses import TxStatus
from relay_core.tracking import apply_upstream, interpret
from relay_testkit import STUB_DEV_KEY, start_stub

DIRECT = "/api/v1/relay/direct"


def _path(tx_id: str) -> str:
    return f"/api/v1/relay/transactions/{tx_id}"


async def test_a_waiting_transaction_is_canceled_at_once_and_asking_again_says_so(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str
) -> None:
    tx_id = await accept_direct(client, api_key)
    headers = {"X-API-Key": api_key}
    answer = await client.delete(_path(tx_id), headers=headers)
    assert answer.status_code == 200, answer.text
    assert answer.json() | {"detail": None} == {
        "transactionId": tx_id,
        "status": "canceled",
        "cancel": "done",
        "detail": None,
    }
    status = await client.get(f"/api/v1/relay/status/{tx_id}", headers=headers)
    assert status.json()["status"] == "canceled"
    again = await client.delete(_path(tx_id), headers=headers)  # a retry is safe
    assert (again.status_code, again.json()["status"]) == (200, "canceled")
    row = await row_of(runtime, tx_id)
    assert (row.status, row.inflight_key, row.executor_tx_id) == ("canceled", None, None)
    async with runtime.sessions() as session:
        events = (
            await session.execute(
                select(
                    TransactionEvent.from_status,
                    TransactionEvent.to_status,
                    TransactionEvent.source,
                ).where(TransactionEvent.transaction_id == tx_id)
            )
        ).all()
    assert [tuple(e) for e in events] == [("pending", "canceled", "client")]


async def test_only_its_own_client_cancels_it_and_a_mined_one_is_too_late(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str, new_key: Any
) -> None:
    tx_id = await accept_direct(client, api_key)
    other = await new_key("other")
    admin = await new_key("boss", admin=True)
    refused = await client.delete(_path(tx_id), headers={"X-API-Key": other})
    assert refused.status_code == 404, refused.text  # as if it did not exist
    manager = await client.delete(_path(tx_id), headers={"X-API-Key": admin})
    assert manager.status_code == 403, manager.text
    unknown = await client.delete(
        _path("00000000-0000-4000-8000-000000000000"), headers={"X-API-Key": api_key}
    )
    assert unknown.status_code == 404
    for status in ("mined", "confirmed", "failed"):
        await set_row(runtime, tx_id, status=status)
        late = await client.delete(_path(tx_id), headers={"X-API-Key": api_key})
        assert late.status_code == 409, late.text
        assert late.json()["error"] == "conflict"
        assert late.json()["status"] == status
    assert (await row_of(runtime, tx_id)).status == "failed"


async def test_a_transaction_a_consumer_is_sending_gets_the_request_written_on_it(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str
) -> None:
    tx_id = await accept_direct(client, api_key)
    await set_row(
        runtime,
        tx_id,
        status="processing",
        submit_started_at=utcnow(),
        callback_url="http://127.0.0.1:9/hook",
    )
    answer = await client.delete(_path(tx_id), headers={"X-API-Key": api_key})
    assert answer.status_code == 202, answer.text
    assert (answer.json()["status"], answer.json()["cancel"]) == ("processing", "requested")
    row = await row_of(runtime, tx_id)
    assert row.status == "processing"
    assert row.cancel_requested_at is not None
    again = await client.delete(_path(tx_id), headers={"X-API-Key": api_key})
    assert (again.status_code, again.json()["cancel"]) == (202, "requested")
    # The request is a step: one event (from and into processing) and one callback, however
    # often it is asked for.
    async with runtime.sessions() as session:
        steps = (
            await session.execute(
                select(TransactionEvent.from_status, TransactionEvent.to_status).where(
                    TransactionEvent.transaction_id == tx_id,
                    TransactionEvent.source == "client",
                )
            )
        ).all()
        told = (
            await session.execute(
                select(Notification.payload).where(Notification.transaction_id == tx_id)
            )
        ).scalars()
        events = [payload["event"] for payload in told]
    assert [tuple(step) for step in steps] == [("processing", "processing")]
    assert events == ["transaction.cancel_requested"]


async def test_the_cancel_and_the_consumers_claim_one_wins_every_round_in_either_order(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str
) -> None:
    """The consumer's claim is a compare-and-set from the version it read (here the same
    relay_core transition it makes); the cancel reads and writes the same way. Run together,
    in both orders, many times: either the cancel won (canceled, the claim found the row
    moved) or the claim won (processing, the cancel written on it for the consumer)."""
    outcomes = {"cancel": 0, "claim": 0}
    for round_ in range(60):
        tx_id = await accept_direct(client, api_key)
        async with runtime.sessions() as session:
            read = await session.get(Transaction, tx_id)  # what the consumer read
        assert read is not None

        async def claim(read: Transaction = read, late_s: float = (round_ % 10) * 0.002) -> bool:
            await asyncio.sleep(late_s)  # from at once to after the cancel is done
            async with runtime.sessions() as session, session.begin():
                return await transition(
                    session,
                    await session.merge(read, load=False),
                    TxStatus.processing,
                    source="consumer",
                    claimed_by="racer",
                    submit_started_at=utcnow(),
                )

        async def cancel(tx_id: str = tx_id) -> httpx.Response:
            return await client.delete(_path(tx_id), headers={"X-API-Key": api_key})

        if round_ % 2:
            claimed, answer = await asyncio.gather(claim(), cancel())
        else:
            answer, claimed = await asyncio.gather(cancel(), claim())
        row = await row_of(runtime, tx_id)
        if answer.status_code == 200:
            assert not claimed, "both the cancel and the claim won"
            assert (row.status, row.claimed_by) == ("canceled", None)
            outcomes["cancel"] += 1
        else:
            assert claimed, f"neither won: {answer.status_code} {answer.text}"
            assert answer.status_code == 202
            assert answer.json()["cancel"] == "requested"
            assert row.status == "processing"
            assert row.cancel_requested_at is not None
            outcomes["claim"] += 1
    assert outcomes["cancel"], outcomes  # both outcomes happened
    assert outcomes["claim"], outcomes


async def test_a_submitted_transaction_is_canceled_through_the_executor(
    api_settings: Any, queues: Any, api_key: str, tmp_path: Path
) -> None:
    stub = start_stub(tmp_path)
    stub.lifecycle(paused=True)  # the executor holds it: sent, not mined
    settings = api_settings.model_copy(update={"executor_url": stub.base_url})
    app = create_app(settings)
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                runtime: Runtime = app.state.runtime
                tx_id = await accept_direct(client, api_key)
                executor = ExecutorClient(stub.base_url, STUB_DEV_KEY, "relayer-1")
                created = await executor.submit(
                    {"to": DEAD, "data": "0x", "value": "0", "speed": "fast"}
                )
                await executor.aclose()
                await set_row(runtime, tx_id, status="submitted", executor_tx_id=created.id)
                answer = await client.delete(_path(tx_id), headers={"X-API-Key": api_key})
                # The stub, like the executor, cancels one it has not sent yet at once.
                assert answer.status_code == 200, answer.text
                assert (answer.json()["status"], answer.json()["cancel"]) == ("canceled", "done")
                _, ledger = stub.ledger()
                assert [entry["status"] for entry in ledger] == ["canceled"]
                assert (await row_of(runtime, tx_id)).status == "canceled"

                # One it has sent is replaced with a no-op: the cancel is sent, a step the
                # client is told of (an event and a callback); the outcome comes later.
                stub.lifecycle(hold_at="submitted")
                sent_id = await accept_direct(client, api_key)
                executor = ExecutorClient(stub.base_url, STUB_DEV_KEY, "relayer-1")
                on_chain = await executor.submit(
                    {"to": DEAD, "data": "0x", "value": "0", "speed": "fast"}
                )
                for _ in range(100):
                    if (await executor.get(on_chain.id)).status == "submitted":
                        break
                    await asyncio.sleep(0.05)
                await executor.aclose()
                await set_row(
                    runtime,
                    sent_id,
                    status="submitted",
                    executor_tx_id=on_chain.id,
                    callback_url="http://127.0.0.1:9/hook",
                )
                taken = await client.delete(_path(sent_id), headers={"X-API-Key": api_key})
                assert taken.status_code == 202, taken.text
                assert (taken.json()["status"], taken.json()["cancel"]) == ("submitted", "sent")
                async with runtime.sessions() as session:
                    steps = (
                        await session.execute(
                            select(TransactionEvent.from_status, TransactionEvent.to_status).where(
                                TransactionEvent.transaction_id == sent_id
                            )
                        )
                    ).all()
                    told = (
                        await session.execute(
                            select(Notification.payload).where(
                                Notification.transaction_id == sent_id
                            )
                        )
                    ).scalars()
                    events = [payload["event"] for payload in told]
                assert [tuple(step) for step in steps] == [("submitted", "submitted")]
                assert events == ["transaction.cancel_sent"]

                stub.kill()  # an executor that does not answer: the request is kept
                second = await accept_direct(client, api_key)
                await set_row(runtime, second, status="submitted", executor_tx_id="gone-1")
                kept = await client.delete(_path(second), headers={"X-API-Key": api_key})
                assert (kept.status_code, kept.json()["cancel"]) == (202, "requested")
                assert (await row_of(runtime, second)).cancel_requested_at is not None
    finally:
        stub.stop()


async def test_a_canceled_gasless_request_gives_its_nonce_turn_back_only_once_final(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str
) -> None:
    """A signer's sequence n, n+1: n+1 canceled before it is sent frees its nonce for a request
    signed again at once; n, canceled at the executor (the cancel sent, not yet final), keeps
    its nonce in flight until the cancel is final."""
    from api_testkit import signed_gasless
    from eth_account import Account

    signer = Account.create()
    headers = {"X-API-Key": api_key}
    gasless = "/api/v1/relay/gasless"

    def body(nonce: int, data: str = "0x") -> dict[str, Any]:
        return signed_gasless(runtime.settings, account=signer, nonce=nonce, data=data)

    first = await client.post(gasless, json=body(0), headers=headers)
    second = await client.post(gasless, json=body(1), headers=headers)
    assert first.status_code == second.status_code == 202, (first.text, second.text)
    first_id, second_id = first.json()["transactionId"], second.json()["transactionId"]
    again = await client.post(gasless, json=body(1, "0x01"), headers=headers)
    assert again.status_code == 409  # nonce 1 is in flight

    assert (await client.delete(_path(second_id), headers=headers)).status_code == 200
    resigned = await client.post(gasless, json=body(1, "0x01"), headers=headers)
    assert resigned.status_code == 202, resigned.text  # its turn was given back

    # Nonce 0 at the executor with its cancel sent: still in flight until the cancel is final.
    await set_row(
        runtime, first_id, status="submitted", executor_tx_id="x-0", cancel_requested_at=utcnow()
    )
    pending_cancel = await client.delete(_path(first_id), headers=headers)
    assert pending_cancel.status_code == 202, pending_cancel.text
    assert (await client.post(gasless, json=body(0, "0x02"), headers=headers)).status_code == 409
    async with runtime.sessions() as session, session.begin():
        tx = await session.get(Transaction, first_id)
        assert tx is not None
        # The executor's word that the no-op is mined (a webhook, the tracker): final.
        mined_noop = interpret({"status": "confirmed", "is_canceled": True, "hash": "0x01"})
        assert mined_noop is not None
        assert await apply_upstream(session, tx, mined_noop, source="test")
    assert (await client.post(gasless, json=body(0, "0x02"), headers=headers)).status_code == 202
