"""Executor webhooks: signed, deduplicated, applied forward-only whatever the order."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import random
import uuid
from typing import Any

import httpx
import pytest
from api_testkit import DEAD
from sqlalchemy import select, update

from relay_api.runtime import Runtime
from relay_core import jsonutil
from relay_core.db.models import Transaction, TransactionEvent
from relay_core.statuses import TxStatus

KEY = "webhook-signing-key-0123456789abcdef-0123"
HOOK = "/api/v1/webhooks/oz-relayer"
RELAYER = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
HASH_1 = "0x" + "11" * 32
HASH_2 = "0x" + "22" * 32


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {"webhook_signing_key": KEY, "executor_url": "http://127.0.0.1:9"}


@pytest.fixture(autouse=True, params=["batched", "one-at-a-time"])
def way(request: pytest.FixtureRequest, runtime: Runtime) -> str:
    """Every test both ways: batched on driver connections (MySQL, relay_api.webhooks.batch)
    and one at a time through a Session (what SQLite gets)."""
    assert runtime.webhooks is not None  # these tests run on MariaDB
    if request.param == "one-at-a-time":
        runtime.webhooks = None
    return str(request.param)


def signed(body: dict[str, Any], key: str = KEY) -> tuple[bytes, dict[str, str]]:
    raw = jsonutil.dumps(body).encode()
    signature = base64.b64encode(hmac.new(key.encode(), raw, hashlib.sha256).digest()).decode()
    return raw, {"X-Signature": signature, "Content-Type": "application/json"}


def update_event(executor_id: str, status: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": str(uuid.uuid4()),
        "event": "transaction_update",
        "payload": {
            "payload_type": "transaction",
            "id": executor_id,
            "status": status,
            "from": RELAYER,
            "to": DEAD,
            "data": "0x1234",
            "hash": fields.pop("hash", None),
            "status_reason": fields.pop("status_reason", None),
            "confirmed_at": fields.pop("confirmed_at", None),
            **fields,
        },
        "timestamp": "2026-11-22T00:00:00Z",
    }


async def _submitted_tx(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str
) -> tuple[str, str]:
    """A transaction as the consumer leaves it: submitted, executor id recorded."""
    response = await client.post(
        "/api/v1/relay/direct", json={"to": DEAD, "data": "0x1234"}, headers={"X-API-Key": api_key}
    )
    tx_id = response.json()["transactionId"]
    executor_id = str(uuid.uuid4())
    async with runtime.sessions() as session, session.begin():
        await session.execute(
            update(Transaction)
            .where(Transaction.id == tx_id)
            .values(status="submitted", executor_tx_id=executor_id, version=Transaction.version + 1)
        )
    return tx_id, executor_id


async def _post(client: httpx.AsyncClient, body: dict[str, Any]) -> httpx.Response:
    raw, headers = signed(body)
    return await client.post(HOOK, content=raw, headers=headers)


async def _row(runtime: Runtime, tx_id: str) -> Transaction:
    async with runtime.sessions() as session:
        tx = await session.get(Transaction, tx_id)
        assert tx is not None
        return tx


async def _trail(runtime: Runtime, tx_id: str) -> list[str]:
    async with runtime.sessions() as session:
        rows = await session.execute(
            select(TransactionEvent.to_status)
            .where(TransactionEvent.transaction_id == tx_id)
            .order_by(TransactionEvent.id)
        )
        return [row[0] for row in rows]


RANK = {s: i for i, s in enumerate(["pending", "processing", "submitted", "mined", "confirmed"])}


@pytest.mark.parametrize("seed", range(6))
async def test_shuffled_duplicated_and_replayed_webhooks_end_confirmed(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str, seed: int
) -> None:
    tx_id, executor_id = await _submitted_tx(client, runtime, api_key)
    lifecycle = [
        update_event(executor_id, "pending"),
        update_event(executor_id, "sent", hash=HASH_1),
        update_event(executor_id, "submitted", hash=HASH_1),
        update_event(executor_id, "mined", hash=HASH_1),
        update_event(executor_id, "confirmed", hash=HASH_1, confirmed_at="2026-11-22T01:02:03Z"),
    ]
    rng = random.Random(seed)
    deliveries = lifecycle + rng.sample(lifecycle, 3)  # duplicates: the same webhook id again
    rng.shuffle(deliveries)
    for body in deliveries:
        response = await _post(client, body)
        assert response.status_code == 200, response.text
    # A late replay of an old status under a fresh id changes nothing either.
    late = update_event(executor_id, "submitted", hash=None)
    assert (await _post(client, late)).json()["status"] == "applied"

    row = await _row(runtime, tx_id)
    assert row.status == "confirmed"
    assert row.hash == HASH_1
    assert row.confirmed_at is not None
    assert row.confirmed_at.isoformat().startswith("2026-11-22T01:02:03")
    trail = await _trail(runtime, tx_id)
    assert trail[-1] == "confirmed"
    assert [RANK[s] for s in trail] == sorted(RANK[s] for s in trail)  # never backwards
    assert len(trail) == len(set(trail))
    status = await client.get(f"/api/v1/relay/status/{tx_id}", headers={"X-API-Key": api_key})
    assert status.json()["status"] == "confirmed"
    assert status.json()["confirmedAt"] is not None


async def test_duplicate_webhook_id_is_acknowledged_and_not_reapplied(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str
) -> None:
    tx_id, executor_id = await _submitted_tx(client, runtime, api_key)
    mined = update_event(executor_id, "mined", hash=HASH_1)
    assert (await _post(client, mined)).json() == {"status": "applied"}
    version = (await _row(runtime, tx_id)).version
    assert (await _post(client, mined)).json() == {"status": "duplicate"}
    assert (await _row(runtime, tx_id)).version == version


async def test_failed_and_noop_replacements_are_final_with_their_reason(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str
) -> None:
    failed_id, failed_exec = await _submitted_tx(client, runtime, api_key)
    reason = "Transaction reverted: receipt status 0"
    for body in [
        update_event(failed_exec, "failed", status_reason=reason),
        update_event(failed_exec, "mined", hash=HASH_1),
    ]:
        await _post(client, body)
    failed = await _row(runtime, failed_id)
    assert (failed.status, failed.error) == ("failed", reason)

    noop_id, noop_exec = await _submitted_tx(client, runtime, api_key)
    noop = update_event(
        noop_exec,
        "confirmed",
        hash=HASH_2,
        to=RELAYER,
        data="0x",
        status_reason="Transaction is expired. Replacing with NOOP.",
    )
    await _post(client, noop)
    row = await _row(runtime, noop_id)
    assert row.status == TxStatus.expired  # a confirmed no-op means it did NOT execute
    assert "NOOP" in (row.error or "")


@pytest.mark.parametrize(
    "tamper",
    ["wrong-key", "missing", "body-changed", "garbage"],
)
async def test_forged_webhooks_are_401_and_change_nothing(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str, tamper: str
) -> None:
    tx_id, executor_id = await _submitted_tx(client, runtime, api_key)
    before = await _row(runtime, tx_id)
    body = update_event(executor_id, "confirmed", hash=HASH_1)
    raw, headers = signed(body, key="another-key-0123456789abcdef-0123456789")
    if tamper == "missing":
        headers.pop("X-Signature")
    elif tamper == "body-changed":
        raw, headers = signed(body)
        raw = raw.replace(b"confirmed", b"failed")
    elif tamper == "garbage":
        headers["X-Signature"] = "not base64 at all"
    response = await client.post(HOOK, content=raw, headers=headers)
    assert response.status_code == 401
    assert response.json()["error"] == "unauthorized"
    after = await _row(runtime, tx_id)
    assert (after.status, after.version, after.hash) == (before.status, before.version, before.hash)


async def test_webhook_for_an_unknown_executor_id_is_404_so_the_executor_retries(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str
) -> None:
    body = update_event(str(uuid.uuid4()), "mined", hash=HASH_1)
    assert (await _post(client, body)).status_code == 404
    # Once the consumer has recorded the id, the very same delivery is applied.
    tx_id, _ = await _submitted_tx(client, runtime, api_key)
    async with runtime.sessions() as session, session.begin():
        await session.execute(
            update(Transaction)
            .where(Transaction.id == tx_id)
            .values(executor_tx_id=body["payload"]["id"])
        )
    assert (await _post(client, body)).json() == {"status": "applied"}
    assert (await _row(runtime, tx_id)).status == "mined"


async def test_webhook_receipts_are_forgotten_once_older_than_their_retention(
    runtime: Runtime,
) -> None:
    from datetime import timedelta

    from relay_api.webhooks import repository
    from relay_core.db.models import WebhookReceipt, utcnow

    # Younger than the runtime's own pruner forgets (an hour), so that it, running meanwhile,
    # takes none of them: this test's cutoff is ten minutes.
    now = utcnow()
    cutoff = now - timedelta(minutes=10)
    async with runtime.sessions() as session, session.begin():
        session.add_all(
            [
                WebhookReceipt(id=f"old-{n}", received_at=now - timedelta(minutes=30))
                for n in range(7)
            ]
            + [WebhookReceipt(id="fresh", received_at=now)]
        )
    async with runtime.sessions() as session, session.begin():
        assert await repository.forget_receipts(session, cutoff, 5) == 5
    async with runtime.sessions() as session, session.begin():
        assert await repository.forget_receipts(session, cutoff, 5) == 2
    async with runtime.sessions() as session:
        left = list((await session.execute(select(WebhookReceipt.id))).scalars())
    assert left == ["fresh"]
    assert "webhook-receipts" in {t.get_name() for t in runtime.tasks}


async def _delivered(client: httpx.AsyncClient, body: dict[str, Any], way: str) -> httpx.Response:
    """Posted until answered 200, as the executor retries. Batched, the first answer is
    200: a row's deliveries are applied one after the other, none finds it moved. One at a
    time, concurrent sessions race for a row, and the loser, three times over, is a 400."""
    for _ in range(10):
        response = await _post(client, body)
        if response.status_code == 200 or way == "batched":
            break
        assert response.json()["detail"] == "the transaction kept changing; retry"
    assert response.status_code == 200, response.text
    return response


async def test_concurrent_webhooks_for_many_transactions_share_batches(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str, way: str
) -> None:
    """Forty transactions' whole lifecycles, duplicated and shuffled, all at once: each ends
    confirmed with its trail forward-only and no status twice, and (batched) fewer batches
    than deliveries."""
    writer = runtime.webhooks
    rows = [await _submitted_tx(client, runtime, api_key) for _ in range(40)]
    deliveries = []
    for _, executor_id in rows:
        lifecycle = [
            update_event(executor_id, "sent", hash=HASH_1),
            update_event(executor_id, "submitted", hash=HASH_1),
            update_event(executor_id, "mined", hash=HASH_1),
            update_event(
                executor_id, "confirmed", hash=HASH_1, confirmed_at="2026-11-22T01:02:03Z"
            ),
        ]
        deliveries += lifecycle + lifecycle[1:3]  # the same webhook ids again
    random.Random(7).shuffle(deliveries)
    answers = await asyncio.gather(*(_delivered(client, body, way) for body in deliveries))
    outcomes = [a.json()["status"] for a in answers]
    assert outcomes.count("duplicate") == 80
    assert outcomes.count("applied") == 160
    for tx_id, _ in rows:
        row = await _row(runtime, tx_id)
        assert (row.status, row.hash) == ("confirmed", HASH_1)
        trail = await _trail(runtime, tx_id)
        assert [RANK[s] for s in trail] == sorted(RANK[s] for s in trail)
        assert len(trail) == len(set(trail))
        cached = await client.get(f"/api/v1/relay/status/{tx_id}", headers={"X-API-Key": api_key})
        assert cached.json()["status"] == "confirmed"
    if way == "batched":
        assert writer is not None
        assert writer.batches < writer.deliveries


async def test_webhooks_arriving_apart_wait_for_each_other(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str, way: str
) -> None:
    """Three transactions' webhooks arriving 30 ms apart, as a busy executor sends them,
    share batches: a writer that takes the first waits for company rather than
    committing it alone. Two writers: at most two batches. (The wait made long here, so that
    a slow machine's scheduling cannot spread the three past it.)"""
    if way != "batched":
        pytest.skip("one at a time, each webhook is its own transaction")
    writer = runtime.webhooks
    assert writer is not None
    writer.linger_s = 0.25
    rows = [await _submitted_tx(client, runtime, api_key) for _ in range(3)]
    batches = writer.batches
    posts = []
    for _, executor_id in rows:
        body = update_event(executor_id, "submitted", hash=HASH_1)
        posts.append(asyncio.create_task(_post(client, body)))
        await asyncio.sleep(0.03)
    answers = await asyncio.gather(*posts)
    assert [a.json() for a in answers] == [{"status": "applied"}] * 3
    assert writer.batches - batches <= 2


async def test_a_row_moved_under_its_batch_is_decided_again_from_the_new_one(
    client: httpx.AsyncClient,
    runtime: Runtime,
    api_key: str,
    way: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Between a batch's read and its compare-and-set another writer (the tracker, another
    API process) moves the row to mined with another hash: the webhook is applied from that
    state, the hash it carries kept, the tracker's move not undone."""
    if way != "batched":
        pytest.skip("the batch's read and write are apart only when batched")
    from relay_api.webhooks import batch

    tx_id, executor_id = await _submitted_tx(client, runtime, api_key)
    real = batch.write_changes_direct
    moved: list[int] = []

    async def tracker_first(*args: Any, **kwargs: Any) -> Any:
        if not moved:
            async with runtime.sessions() as session, session.begin():
                moved.append(1)
                await session.execute(
                    update(Transaction)
                    .where(Transaction.id == tx_id)
                    .values(status="mined", hash=HASH_2, version=Transaction.version + 1)
                )
        return await real(*args, **kwargs)

    monkeypatch.setattr(batch, "write_changes_direct", tracker_first)
    answer = await _post(client, update_event(executor_id, "submitted", hash=HASH_1))
    assert answer.json() == {"status": "applied"}
    row = await _row(runtime, tx_id)
    assert (row.status, row.hash) == ("mined", HASH_1)
    assert moved == [1]


async def test_a_row_that_keeps_moving_is_a_400_that_keeps_no_receipt(
    client: httpx.AsyncClient,
    runtime: Runtime,
    api_key: str,
    way: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Moved under every try: 400, and the webhook's receipt is gone with it, so the
    executor's retry of the very same delivery is applied, not called a duplicate."""
    if way != "batched":
        pytest.skip("the batch's read and write are apart only when batched")
    from relay_api.webhooks import batch

    tx_id, executor_id = await _submitted_tx(client, runtime, api_key)
    real = batch.write_changes_direct

    async def always_moved(*args: Any, **kwargs: Any) -> Any:
        async with runtime.sessions() as session, session.begin():
            await session.execute(
                update(Transaction)
                .where(Transaction.id == tx_id)
                .values(version=Transaction.version + 1)
            )
        return await real(*args, **kwargs)

    monkeypatch.setattr(batch, "write_changes_direct", always_moved)
    mined = update_event(executor_id, "mined", hash=HASH_1)
    refused = await _post(client, mined)
    assert refused.status_code == 400
    assert refused.json()["detail"] == "the transaction kept changing; retry"
    assert (await _row(runtime, tx_id)).status == "submitted"
    monkeypatch.setattr(batch, "write_changes_direct", real)
    assert (await _post(client, mined)).json() == {"status": "applied"}
    assert (await _row(runtime, tx_id)).status == "mined"
