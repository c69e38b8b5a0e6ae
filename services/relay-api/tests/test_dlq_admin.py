"""Dead-letter tooling as an operator uses it: each message listed with its reason and its
transaction's row, one shown with its body and history, and the whole queue purged only when
named; reading takes nothing from the queue; a client key may do none of it. `relay dlq` is
the same code (tested at the end, as a process)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from api_testkit import DEAD
from sqlalchemy import select, update

from relay_api.runtime import Runtime
from relay_core import queue as queue_mod
from relay_core.db.models import Transaction
from relay_testkit import infra_process_env, relay_command


async def _dead_letter(sqs: Any, dlq_url: str, transaction_id: str, **reason: str) -> str:
    attributes = {
        name: {"DataType": "String", "StringValue": value} for name, value in reason.items()
    }
    if reason:
        attributes["receiveCount"] = {"DataType": "Number", "StringValue": "3"}
    sent = await sqs.send_message(
        QueueUrl=dlq_url,
        MessageBody=queue_mod.TransactionMessage.new(transaction_id, "direct").body(),
        MessageAttributes=attributes,
    )
    return str(sent["MessageId"])


async def _depths(sqs: Any, url: str) -> tuple[int, int]:
    """(visible, hidden)"""
    attributes = (await sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"]))[
        "Attributes"
    ]
    return (
        int(attributes["ApproximateNumberOfMessages"]),
        int(attributes["ApproximateNumberOfMessagesNotVisible"]),
    )


async def test_an_operator_lists_shows_and_purges_dead_letters(
    client: httpx.AsyncClient,
    runtime: Runtime,
    new_key: Any,
    sqs: Any,
    queues: tuple[str, str],
    infra_env: dict[str, Any],
) -> None:
    key = await new_key("acme")
    admin = {"X-API-Key": await new_key("ops", admin=True)}
    accepted = await client.post(
        "/api/v1/relay/direct", json={"to": DEAD, "data": "0x01"}, headers={"X-API-Key": key}
    )
    tx_id = accepted.json()["transactionId"]
    dlq_url = queues[1]
    refused = await _dead_letter(
        sqs, dlq_url, tx_id, deadLetterKind="permanent", deadLetterReason="executor 400: nonce"
    )
    moved = await _dead_letter(sqs, dlq_url, "00000000-0000-4000-8000-000000000000")

    listed = await client.get("/api/v1/admin/dlq", headers=admin)
    assert listed.status_code == 200, listed.text
    view = listed.json()
    assert view["depth"] == 2
    by_id = {m["messageId"]: m for m in view["messages"]}
    assert by_id[refused]["reason"] == "permanent: executor 400: nonce"
    assert by_id[refused]["receiveCount"] == 3
    assert by_id[refused]["transaction"]["status"] == "pending"
    assert by_id[refused]["transaction"]["id"] == tx_id
    assert by_id[moved]["kind"] is None
    assert by_id[moved]["reason"].startswith("moved by the queue's redrive policy")
    assert by_id[moved]["transaction"] is None
    assert await _depths(sqs, dlq_url) == (2, 0)  # reading took nothing

    for ref in (tx_id, refused):
        shown = await client.get(f"/api/v1/admin/dlq/{ref}", headers=admin)
        assert shown.status_code == 200, shown.text
        assert shown.json()["messageId"] == refused
        assert json.loads(shown.json()["body"])["transactionId"] == tx_id
        assert shown.json()["events"] == []
    missing = await client.get("/api/v1/admin/dlq/nothing-here", headers=admin)
    assert missing.status_code == 404

    # Reading hid nothing for longer than it took (a receive of two hides both).
    assert (await _depths(sqs, dlq_url)) == (2, 0)
    # The same from the command line.
    env = infra_process_env(infra_env)
    printed = relay_command(env, "dlq", "list")
    assert f"{view['queue']}: 2 message(s); 2 shown" in printed, printed
    assert "why: permanent: executor 400: nonce" in printed
    assert "row: pending" in printed
    assert f"tx {tx_id}" in relay_command(env, "dlq", "show", refused)

    # A client key may not; a purge must name the queue.
    plain = {"X-API-Key": key}
    assert (await client.get("/api/v1/admin/dlq", headers=plain)).status_code == 403
    assert (await client.delete("/api/v1/admin/dlq", headers=admin)).status_code == 400
    purged = await client.delete(
        "/api/v1/admin/dlq", params={"confirm": view["queue"]}, headers=admin
    )
    assert purged.status_code == 200, purged.text
    assert purged.json() == {"purged": 2}
    assert await _depths(sqs, dlq_url) == (0, 0)


async def test_a_redrive_sends_each_chosen_message_back_once_and_says_why_it_left_others(
    client: httpx.AsyncClient, runtime: Runtime, new_key: Any, sqs: Any, queues: tuple[str, str]
) -> None:
    key = {"X-API-Key": await new_key("acme")}
    admin = {"X-API-Key": await new_key("ops", admin=True)}
    ids = []
    for i in range(3):
        answer = await client.post(
            "/api/v1/relay/direct", json={"to": DEAD, "data": f"0x0{i}"}, headers=key
        )
        ids.append(answer.json()["transactionId"])
    waiting, processing, exhausted = ids
    async with runtime.sessions() as session, session.begin():
        await session.execute(
            update(Transaction)
            .where(Transaction.id == processing)
            .values(status="processing", claimed_by="gone:1", dead_letters=1)
        )
        await session.execute(
            update(Transaction)
            .where(Transaction.id == exhausted)
            .values(status="failed", error="executor unavailable for 3600 s")
        )
    queue_url, dlq_url = queues
    # The accepts' own messages (published after their commits) out of the way.
    for _ in range(100):
        if await _depths(sqs, queue_url) == (3, 0):
            break
        await asyncio.sleep(0.1)
    await sqs.purge_queue(QueueUrl=queue_url)
    await _dead_letter(sqs, dlq_url, waiting)
    processing_message = await _dead_letter(sqs, dlq_url, processing)
    await _dead_letter(
        sqs, dlq_url, exhausted, deadLetterKind="exhausted", deadLetterReason="budget spent"
    )
    poison = await sqs.send_message(QueueUrl=dlq_url, MessageBody="not json")

    redriven = await client.post(
        "/api/v1/admin/dlq/redrive",
        json={"messages": [waiting, processing_message, exhausted, poison["MessageId"], "nope"]},
        headers=admin,
    )
    assert redriven.status_code == 200, redriven.text
    result = redriven.json()
    assert sorted(r["transactionId"] for r in result["redriven"]) == sorted([waiting, processing])
    assert sorted(r["why"] for r in result["left"]) == [
        "final: failed (executor unavailable for 3600 s); a final transaction is not run again "
        "(its client sends it anew)",
        "nope: not in the DLQ",
        "not a transaction message",
    ]
    # Each redriven transaction is in the work queue once; what was left is still in the DLQ.
    assert await _depths(sqs, dlq_url) == (2, 0)
    received = await sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10)
    bodies = [json.loads(m["Body"])["transactionId"] for m in received["Messages"]]
    assert sorted(bodies) == sorted([waiting, processing])

    # The rows are as they were, but for the reconciler's count of their dead letters; the
    # failed one stays failed.
    async with runtime.sessions() as session:
        rows = {
            tx.id: tx
            for tx in await session.scalars(select(Transaction).where(Transaction.id.in_(ids)))
        }
    assert (rows[processing].status, rows[processing].claimed_by) == ("processing", "gone:1")
    assert rows[processing].dead_letters == 0
    assert rows[exhausted].status == "failed"

    nothing = await client.post("/api/v1/admin/dlq/redrive", json={}, headers=admin)
    assert nothing.status_code == 400
    # "all" is a boolean, not anything that reads as one (found by the fuzzer)
    lax = await client.post("/api/v1/admin/dlq/redrive", json={"all": 0}, headers=admin)
    assert lax.status_code == 422, lax.text
    # The most ids the schema allows, each as long as it allows, fit the body limit (the
    # fuzzer's long list got 413); one more is refused by the schema.
    longest = ["a" * 100] * 500
    fits = await client.post("/api/v1/admin/dlq/redrive", json={"messages": longest}, headers=admin)
    assert fits.status_code == 200, fits.text
    assert all(item["why"].endswith("not in the DLQ") for item in fits.json()["left"])
    over = await client.post(
        "/api/v1/admin/dlq/redrive", json={"messages": [*longest, "a"]}, headers=admin
    )
    assert over.status_code == 422, over.text
