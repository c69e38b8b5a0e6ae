"""DELETE /api/v1/relay/transactions/{id}: a client's cancel, decided against the consumer's
claim by the row's version (one of them wins, every time), handed to the executor once it
has the transaction, refused once it is mined."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
from api_testkit import DEAD
from sqlalchemy import select, update

from relay_api.app import create_app
from relay_api.runtime import Runtime
from relay_core.db.models import Transaction, TransactionEvent, utcnow
from relay_core.db.transitions import transition
from relay_core.executor import ExecutorClient
from relay_core.statuses import TxStatus
from relay_testkit import STUB_DEV_KEY, start_stub

DIRECT = "/api/v1/relay/direct"


def _path(tx_id: str) -> str:
    return f"/api/v1/relay/transactions/{tx_id}"


async def _accept(client: httpx.AsyncClient, key: str) -> str:
    response = await client.post(DIRECT, json={"to": DEAD}, headers={"X-API-Key": key})
    assert response.status_code == 202, response.text
    return str(response.json()["transactionId"])


async def _row(runtime: Runtime, tx_id: str) -> Transaction:
    async with runtime.sessions() as session:
        tx = await session.get(Transaction, tx_id)
        assert tx is not None
        return tx


async def _set(runtime: Runtime, tx_id: str, **values: Any) -> None:
    async with runtime.sessions() as session, session.begin():
        await session.execute(
            update(Transaction)
            .where(Transaction.id == tx_id)
            .values(version=Transaction.version + 1, **values)
        )


async def test_a_waiting_transaction_is_canceled_at_once_and_asking_again_says_so(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str
) -> None:
    tx_id = await _accept(client, api_key)
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
    row = await _row(runtime, tx_id)
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
    tx_id = await _accept(client, api_key)
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
        await _set(runtime, tx_id, status=status)
        late = await client.delete(_path(tx_id), headers={"X-API-Key": api_key})
        assert late.status_code == 409, late.text
        assert late.json()["error"] == "conflict"
        assert late.json()["status"] == status
    assert (await _row(runtime, tx_id)).status == "failed"


async def test_a_transaction_a_consumer_is_sending_gets_the_request_written_on_it(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str
) -> None:
    tx_id = await _accept(client, api_key)
    await _set(runtime, tx_id, status="processing", submit_started_at=utcnow())
    answer = await client.delete(_path(tx_id), headers={"X-API-Key": api_key})
    assert answer.status_code == 202, answer.text
    assert (answer.json()["status"], answer.json()["cancel"]) == ("processing", "requested")
    row = await _row(runtime, tx_id)
    assert row.status == "processing"
    assert row.cancel_requested_at is not None
    again = await client.delete(_path(tx_id), headers={"X-API-Key": api_key})
    assert (again.status_code, again.json()["cancel"]) == (202, "requested")


async def test_the_cancel_and_the_consumers_claim_one_wins_every_round_in_either_order(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str
) -> None:
    """The consumer's claim is a compare-and-set from the version it read (here the same
    relay_core transition it makes); the cancel reads and writes the same way. Run together,
    in both orders, many times: either the cancel won (canceled, the claim found the row
    moved) or the claim won (processing, the cancel written on it for the consumer)."""
    outcomes = {"cancel": 0, "claim": 0}
    for round_ in range(60):
        tx_id = await _accept(client, api_key)
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
        row = await _row(runtime, tx_id)
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
                tx_id = await _accept(client, api_key)
                executor = ExecutorClient(stub.base_url, STUB_DEV_KEY, "relayer-1")
                created = await executor.submit(
                    {"to": DEAD, "data": "0x", "value": "0", "speed": "fast"}
                )
                await executor.aclose()
                await _set(runtime, tx_id, status="submitted", executor_tx_id=created.id)
                answer = await client.delete(_path(tx_id), headers={"X-API-Key": api_key})
                # The stub, like the executor, cancels one it has not sent yet at once.
                assert answer.status_code == 200, answer.text
                assert (answer.json()["status"], answer.json()["cancel"]) == ("canceled", "done")
                _, ledger = stub.ledger()
                assert [entry["status"] for entry in ledger] == ["canceled"]
                assert (await _row(runtime, tx_id)).status == "canceled"

                stub.kill()  # an executor that does not answer: the request is kept
                second = await _accept(client, api_key)
                await _set(runtime, second, status="submitted", executor_tx_id="gone-1")
                kept = await client.delete(_path(second), headers={"X-API-Key": api_key})
                assert (kept.status_code, kept.json()["cancel"]) == (202, "requested")
                assert (await _row(runtime, second)).cancel_requested_at is not None
    finally:
        stub.stop()
