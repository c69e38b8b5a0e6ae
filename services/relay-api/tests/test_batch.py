"""POST /api/v1/relay/batch: up to 100 direct transactions accepted together or refused
together (naming the item), each counted by the rate limit and the spend policy, idempotent
item by item, written in one database transaction and each sent to the queue."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from api_testkit import DEAD, count_rows, receive_all
from sqlalchemy import select

from relay_api.relay import repository
from relay_api.runtime import Runtime
from relay_core import jsonutil
from relay_core.db.models import Transaction

BATCH = "/api/v1/relay/batch"


def _items(count: int, **extra: Any) -> list[dict[str, Any]]:
    return [{"to": DEAD, "value": str(index + 1), **extra} for index in range(count)]


async def _send(
    client: httpx.AsyncClient, key: str, items: list[dict[str, Any]], **headers: str
) -> httpx.Response:
    return await client.post(
        BATCH, json={"transactions": items}, headers={"X-API-Key": key, **headers}
    )


async def _rows(runtime: Runtime) -> dict[str, Transaction]:
    async with runtime.sessions() as session:
        return {tx.id: tx for tx in (await session.execute(select(Transaction))).scalars()}


async def _admin_sets(client: httpx.AsyncClient, new_key: Any, **changes: Any) -> None:
    admin = await new_key("ops", admin=True)
    response = await client.patch(
        "/api/v1/admin/clients/acme", json=changes, headers={"X-API-Key": admin}
    )
    assert response.status_code == 200, response.text


async def test_a_batchs_transactions_reach_the_queue_packed_ten_to_a_message(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str, sqs: Any, queues: tuple[str, str]
) -> None:
    response = await _send(client, api_key, _items(25), **{"X-Request-Id": "batch-25"})
    assert response.status_code == 202, response.text
    ids = [result["transactionId"] for result in response.json()["results"]]
    await runtime.publisher.stop()  # flushes what is buffered
    messages = await receive_all(sqs, queues[0])
    bodies = sorted(
        (jsonutil.loads(m["Body"]) for m in messages), key=lambda b: len(b["transactionIds"])
    )
    # Three messages (one SendMessageBatch), not 25: 10, 10 and 5 of the batch's, in order.
    assert [len(body["transactionIds"]) for body in bodies] == [5, 10, 10]
    assert {body["schemaVersion"] for body in bodies} == {2}
    assert sorted(tx for body in bodies for tx in body["transactionIds"]) == sorted(ids)
    for body in bodies:
        assert body["transactionIds"] == [tx for tx in ids if tx in body["transactionIds"]]
    for message in messages:
        attributes = message["MessageAttributes"]
        assert "transactionId" not in attributes
        assert attributes["requestId"]["StringValue"] == "batch-25"
    assert all(row.enqueued_at is not None for row in (await _rows(runtime)).values())


async def test_a_batch_of_20_is_accepted_in_order_and_each_sent_to_the_queue(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str
) -> None:
    response = await _send(client, api_key, _items(20))
    assert response.status_code == 202, response.text
    results = response.json()["results"]
    assert len(results) == 20
    assert all(result["status"] == "pending" for result in results)
    assert "idempotent-replayed" not in response.headers
    rows = await _rows(runtime)
    # In the request's order: the n-th answer is the n-th transaction.
    assert [rows[result["transactionId"]].request["value"] for result in results] == [
        str(n) for n in range(1, 21)
    ]
    assert len({row.created_at for row in rows.values()}) == 1  # one statement
    # only the accept's columns are written: the rest wait, NULL, for the consumer
    assert all(row.claimed_by is None and row.hash is None for row in rows.values())
    assert {(row.status, row.version, row.attempts) for row in rows.values()} == {("pending", 1, 0)}
    for _ in range(100):  # the publisher marks each row once its message is sent
        if all(row.enqueued_at is not None for row in (await _rows(runtime)).values()):
            break
        await asyncio.sleep(0.05)
    assert all(row.enqueued_at is not None for row in (await _rows(runtime)).values())


def test_a_new_row_has_only_the_columns_the_accept_writes() -> None:
    row = repository.new_row(client_id="c", type="direct", lane="fast")
    assert set(row) == set(repository.NEW_COLUMNS)
    assert (row["status"], row["version"], row["attempts"], row["lane"]) == (
        "pending",
        1,
        0,
        "fast",
    )
    # The consumer's columns are not a new row's: written here they would be dropped.
    assert {"hash", "executor_tx_id", "claimed_by", "enqueued_at"}.isdisjoint(row)
    with pytest.raises(TypeError, match="executor_tx_id"):
        repository.new_row(client_id="c", type="direct", executor_tx_id="x")
    with pytest.raises(TypeError, match="hash"):
        repository.new_rows({"client_id": "c", "type": "direct"}, [{"hash": "0x"}])


async def test_one_bad_item_refuses_the_batch_naming_its_index_and_writes_nothing(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str
) -> None:
    items = _items(10)
    items[7]["gasLimit"] = "100"  # below 21000: a rule beyond the schema
    refused = await _send(client, api_key, items)
    assert refused.status_code == 400, refused.text
    assert refused.json()["detail"].startswith("transactions.7.gasLimit: "), refused.json()

    items = _items(10)
    items[3]["to"] = "0x12"  # not an address: the schema's own rule
    refused = await _send(client, api_key, items)
    assert refused.status_code == 422, refused.text
    assert [field["field"] for field in refused.json()["fields"]] == ["transactions.3.to"]

    for transactions in ([], _items(101)):
        response = await _send(client, api_key, transactions)
        assert response.status_code == 422, response.text
    assert await count_rows(runtime) == 0


async def test_the_same_batch_again_is_answered_as_it_was_item_by_item(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str
) -> None:
    first = await _send(client, api_key, _items(5), **{"Idempotency-Key": "drop-7"})
    again = await _send(client, api_key, _items(5), **{"Idempotency-Key": "drop-7"})
    assert first.status_code == again.status_code == 202
    assert again.json() == first.json()
    assert again.headers["idempotent-replayed"] == "true"
    assert await count_rows(runtime) == 5

    # Grown by two: the five are answered as they were, the two are new.
    grown = await _send(client, api_key, _items(7), **{"Idempotency-Key": "drop-7"})
    assert grown.status_code == 202
    assert grown.json()["results"][:5] == first.json()["results"]
    assert "idempotent-replayed" not in grown.headers
    assert await count_rows(runtime) == 7

    # A single request's key is never a batch item's (they are keyed "<key> <index>").
    single = await client.post(
        "/api/v1/relay/direct",
        json={"to": DEAD, "value": "1"},
        headers={"X-API-Key": api_key, "Idempotency-Key": "drop-7"},
    )
    assert single.status_code == 202
    assert single.json()["transactionId"] != first.json()["results"][0]["transactionId"]

    changed = _items(5)
    changed[2]["value"] = "999"
    conflict = await _send(client, api_key, changed, **{"Idempotency-Key": "drop-7"})
    assert conflict.status_code == 409, conflict.text
    assert conflict.json()["detail"].startswith("transactions.2: ")
    assert await count_rows(runtime) == 8


async def test_the_same_batch_sent_twice_at_once_is_written_once(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str
) -> None:
    answers = await asyncio.gather(
        *(_send(client, api_key, _items(30), **{"Idempotency-Key": "race"}) for _ in range(3))
    )
    assert [answer.status_code for answer in answers] == [202] * 3, [a.text for a in answers]
    assert len({str(answer.json()) for answer in answers}) == 1
    assert await count_rows(runtime) == 30


async def test_the_spend_policy_judges_each_transaction_and_the_budget_their_sum(
    client: httpx.AsyncClient, runtime: Runtime, new_key: Any
) -> None:
    key = await new_key("acme")
    await _admin_sets(client, new_key, maxValueWei="5", dailyValueWei="12")
    refused = await _send(client, key, _items(6))  # the sixth asks for 6 wei
    assert refused.status_code == 403, refused.text
    assert refused.json()["detail"].startswith("transactions.5: policy maxValueWei: ")
    over_budget = await _send(client, key, _items(5))  # 15 wei of a 12 wei day
    assert over_budget.status_code == 403, over_budget.text
    assert "dailyValueWei" in over_budget.json()["detail"]
    assert await count_rows(runtime) == 0
    # Nothing of the refused batches was spent from the budget.
    accepted = await _send(client, key, _items(4))  # 10 wei
    assert accepted.status_code == 202, accepted.text
    assert (await _send(client, key, _items(2))).status_code == 403  # 3 more: past 12


async def test_each_transaction_counts_against_the_rate_limit(
    client: httpx.AsyncClient, runtime: Runtime, new_key: Any
) -> None:
    key = await new_key("acme")
    await _admin_sets(client, new_key, rateLimitPerS=0.5, rateLimitBurst=10)
    too_big = await _send(client, key, _items(11))
    assert too_big.status_code == 400, too_big.text
    assert "burst of 10" in too_big.json()["detail"]
    assert (await _send(client, key, _items(8))).status_code == 202
    refused = await _send(client, key, _items(3))  # 8 + 3 (the 11-item try took one)
    assert refused.status_code == 429, refused.text
    assert int(refused.headers["retry-after"]) >= 1
    assert await count_rows(runtime) == 8


@pytest.mark.parametrize("role", ["admin", "operator"])
async def test_a_managing_key_submits_no_batch(
    client: httpx.AsyncClient, new_key: Any, role: str
) -> None:
    key = await new_key("ops", role=role)
    response = await _send(client, key, _items(2))
    assert response.status_code == 403, response.text


async def test_a_batch_written_by_another_request_after_the_look_up_is_answered_as_a_replay(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = await _send(client, api_key, _items(3), **{"Idempotency-Key": "late"})
    assert first.status_code == 202
    looked_up = repository.by_idempotency_keys
    calls = []

    async def too_early(*args: Any) -> Any:  # as if the other request had not committed yet
        calls.append(args)
        return {} if len(calls) == 1 else await looked_up(*args)

    monkeypatch.setattr(repository, "by_idempotency_keys", too_early)
    again = await _send(client, api_key, _items(3), **{"Idempotency-Key": "late"})
    assert again.status_code == 202, again.text
    assert again.json() == first.json()
    assert len(calls) == 2  # the unique index refused the INSERT; the look-up ran again
    assert await count_rows(runtime) == 3


class TestPackingOff:
    """``RELAY_OUTBOX_PACK=false``: each transaction in a message of its own, as consumers
    older than the release that reads packed messages expect (an upgrade's first step)."""

    @pytest.fixture
    def settings_overrides(self) -> dict[str, Any]:
        return {"outbox_pack": False}

    async def test_a_batchs_transactions_go_one_to_a_message(
        self,
        client: httpx.AsyncClient,
        runtime: Runtime,
        api_key: str,
        sqs: Any,
        queues: tuple[str, str],
    ) -> None:
        response = await _send(client, api_key, _items(12))
        assert response.status_code == 202, response.text
        ids = {result["transactionId"] for result in response.json()["results"]}
        await runtime.publisher.stop()
        messages = await receive_all(sqs, queues[0])
        bodies = [jsonutil.loads(message["Body"]) for message in messages]
        assert {body["schemaVersion"] for body in bodies} == {1}
        assert {body["transactionId"] for body in bodies} == ids
        assert len(bodies) == 12
