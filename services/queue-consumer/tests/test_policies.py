"""The consumer checks a client's spend policy again, as it is when the message arrives: an
operator who tightens a policy after a leak stops what is already queued, and nothing the
policy refuses reaches the executor."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from consumer_testkit import (
    DEAD,
    Stub,
    rows,
    seed_rows,
    send_messages,
    status_counts,
    sync_engine,
    wait_until,
)
from sqlalchemy import insert, select, update

from relay_core.db.models import ApiClient, ClientSpend, Transaction, utcnow
from relay_core.spending import bucket_of

OTHER = "0x1111111111111111111111111111111111111111"


def _client_of(database_url: str, transaction_id: str) -> str:
    return next(r["client_id"] for r in rows(database_url) if r["id"] == transaction_id)


def _set_policy(database_url: str, client_id: str, **values: Any) -> None:
    engine = sync_engine(database_url)
    with engine.begin() as conn:
        conn.execute(update(ApiClient).where(ApiClient.id == client_id).values(**values))
    engine.dispose()


async def test_a_policy_tightened_after_accept_stops_what_is_queued(
    database_url: str, sqs: Any, queues: tuple[str, str], stub: Stub, run_consumer: Any
) -> None:
    requests = [
        {"to": OTHER, "data": "0x01", "value": "0"},  # not an allowed destination
        {"to": DEAD, "data": "0x02", "value": "101"},  # above the value per transaction
        {"to": DEAD, "data": "0x03", "value": "5", "gasLimit": "90000"},  # gas above the limit
        {"to": DEAD, "data": "0x04", "value": "5"},  # no gas limit named, while one is set
        {"to": DEAD, "data": "0x05", "value": "100", "gasLimit": "50000"},  # within every rule
    ]
    ids = seed_rows(database_url, len(requests), request=lambda i: requests[i])
    _set_policy(
        database_url,
        _client_of(database_url, ids[0]),
        policy_allowed_to=[DEAD.lower()],
        policy_max_value_wei="100",
        policy_max_gas=50_000,
    )
    await send_messages(sqs, queues[0], ids)
    await run_consumer()
    await wait_until(
        lambda: status_counts(database_url) == {"failed": 4, "submitted": 1}, 60, "decided"
    )
    by_id = {r["id"]: r for r in rows(database_url)}
    reasons = [by_id[i]["error"] for i in ids[:4]]
    for reason, rule in zip(reasons, ("allowedTo", "maxValueWei", "maxGas", "maxGas"), strict=True):
        assert reason.startswith(f"refused before submission: policy {rule}: "), reason
    count, entries = stub.ledger()
    assert count == 1
    assert entries[0]["data"] == "0x05"


async def test_a_lowered_daily_budget_is_refused_before_submission(
    database_url: str, sqs: Any, queues: tuple[str, str], stub: Stub, run_consumer: Any
) -> None:
    ids = seed_rows(database_url, 2, request=lambda i: {"to": DEAD, "data": "0x", "value": "7"})
    client_id = _client_of(database_url, ids[0])
    # Reserved at accept when the budget was higher; an operator has since lowered it.
    now = utcnow()
    engine = sync_engine(database_url)
    with engine.begin() as conn:
        conn.execute(
            insert(ClientSpend).values(client_id=client_id, bucket=bucket_of(now), value_wei="14")
        )
        # Older than a day: no longer counted.
        conn.execute(
            insert(ClientSpend).values(
                client_id=client_id, bucket=bucket_of(now - timedelta(hours=25)), value_wei="999"
            )
        )
        # Counted in this window's 14 wei.
        conn.execute(
            update(Transaction).where(Transaction.id == ids[0]).values(spend_bucket=bucket_of(now))
        )
        # A zero-value transaction of the same client is not held by the budget.
        conn.execute(
            update(Transaction)
            .where(Transaction.id == ids[1])
            .values(request={"to": DEAD, "data": "0x", "value": "0"})
        )
    engine.dispose()
    _set_policy(database_url, client_id, policy_daily_value_wei="10")
    await send_messages(sqs, queues[0], ids)
    await run_consumer()
    await wait_until(
        lambda: status_counts(database_url) == {"failed": 1, "submitted": 1}, 60, "decided"
    )
    failed = next(r for r in rows(database_url) if r["status"] == "failed")
    assert failed["id"] == ids[0]
    assert "policy dailyValueWei: this client's last 24 hours hold 14 wei" in failed["error"]
    assert stub.ledger_count() == 1


async def test_gasless_value_is_refused_unless_allowed(
    database_url: str, sqs: Any, queues: tuple[str, str], stub: Stub, run_consumer: Any
) -> None:
    """Accepted when the client's policy allowed gasless value; disallowed since."""
    request = {
        "request": {
            "from": OTHER,
            "to": DEAD,
            "value": "1",
            "gas": "100000",
            "nonce": "0",
            "deadline": 2**40,
            "data": "0x",
        },
        "signature": "0x" + "11" * 65,  # never looked at: refused before anything is sent
        "forwarder": "0x5FbDB2315678afecb367f032d93F642f64180aa3",
        "chainId": 31337,
    }
    ids = seed_rows(database_url, 1, tx_type="gasless", request=lambda i: request)
    await send_messages(sqs, queues[0], ids, tx_type="gasless")
    await run_consumer()
    await wait_until(lambda: status_counts(database_url) == {"failed": 1}, 30, "refused")
    (row,) = rows(database_url)
    assert row["error"].startswith("refused before submission: policy gaslessValue: ")
    assert row["inflight_key"] is None
    assert stub.ledger_count() == 0


async def test_nothing_is_sent_for_a_client_without_a_policy_or_whose_key_was_revoked(
    database_url: str, sqs: Any, queues: tuple[str, str], stub: Stub, run_consumer: Any
) -> None:
    ungranted = seed_rows(database_url, 2)
    revoked = seed_rows(database_url, 2)
    _set_policy(database_url, _client_of(database_url, ungranted[0]), policy_granted_at=None)
    _set_policy(database_url, _client_of(database_url, revoked[0]), revoked_at=utcnow())
    await send_messages(sqs, queues[0], ungranted + revoked)
    await run_consumer()
    await wait_until(lambda: status_counts(database_url) == {"failed": 4}, 60, "decided")
    by_id = {r["id"]: r for r in rows(database_url)}
    for tx_id in ungranted:
        assert by_id[tx_id]["error"].startswith("refused before submission: policy noPolicy: ")
    for tx_id in revoked:
        assert by_id[tx_id]["error"].startswith("refused before submission: policy revoked: ")
    assert stub.ledger_count() == 0


def _spend(database_url: str, client_id: str) -> dict[Any, tuple[str, str]]:
    engine = sync_engine(database_url)
    with engine.connect() as conn:
        found = {
            r.bucket: (r.value_wei, r.fee_wei)
            for r in conn.execute(select(ClientSpend).where(ClientSpend.client_id == client_id))
        }
    engine.dispose()
    return found


async def test_a_reservation_that_left_the_24_hours_is_judged_again_when_the_money_moves(
    database_url: str, sqs: Any, queues: tuple[str, str], stub: Stub, run_consumer: Any
) -> None:
    # Accepted a day and more ago (held in a paused lane, or through an outage): their
    # reservations are in a bucket the window no longer counts.
    ids = seed_rows(
        database_url, 2, request=lambda i: {"to": DEAD, "data": f"0x0{i}", "value": "60"}
    )
    client_id = _client_of(database_url, ids[0])
    yesterday = bucket_of(utcnow() - timedelta(hours=25))
    _set_policy(database_url, client_id, policy_daily_value_wei="100")
    engine = sync_engine(database_url)
    with engine.begin() as conn:
        conn.execute(
            insert(ClientSpend).values(
                client_id=client_id, bucket=yesterday, value_wei="120", fee_wei="0"
            )
        )
        conn.execute(
            update(Transaction).where(Transaction.id.in_(ids)).values(spend_bucket=yesterday)
        )
    engine.dispose()
    await send_messages(sqs, queues[0], ids)
    await run_consumer()
    await wait_until(
        lambda: status_counts(database_url) == {"submitted": 1, "failed": 1}, 60, "decided"
    )
    (refused,) = [r for r in rows(database_url) if r["status"] == "failed"]
    assert refused["error"].startswith("refused before submission: policy dailyValueWei: ")
    assert stub.ledger_count() == 1
    # The one sent is counted in the window it was sent in.
    now = bucket_of(utcnow())
    assert _spend(database_url, client_id).get(now, ("0", "0"))[0] == "60"
    (sent,) = [r for r in rows(database_url) if r["status"] == "submitted"]
    assert sent["spend_bucket"] >= bucket_of(utcnow() - timedelta(minutes=5))


class _Chain:
    """A chain that has a receipt for every hash: 21,000 gas at 10 wei."""

    async def receipt(self, tx_hash: str) -> dict[str, Any]:
        return {"blockNumber": "0x10", "gasUsed": hex(21_000), "effectiveGasPrice": "0xa"}

    async def receipts(self, tx_hashes: list[str]) -> list[dict[str, Any]]:
        return [await self.receipt(tx_hash) for tx_hash in tx_hashes]


async def test_a_fee_is_settled_to_its_receipt_and_the_rest_goes_back_to_the_budget(
    database_url: str, consumer_settings: Any
) -> None:
    from queue_consumer.tracking.receipts import FeeSettler
    from relay_core.db.engine import create_engine, create_sessionmaker

    mined, never_sent, waiting = seed_rows(database_url, 3)
    client_id = _client_of(database_url, mined)
    _set_policy(database_url, client_id, policy_daily_fee_wei="10000000")
    now = bucket_of(utcnow())
    engine = sync_engine(database_url)
    with engine.begin() as conn:
        conn.execute(
            insert(ClientSpend).values(
                client_id=client_id, bucket=now, value_wei="0", fee_wei="3000000"
            )
        )
        common = {"spend_bucket": now, "reserved_fee_wei": "1000000"}
        conn.execute(
            update(Transaction)
            .where(Transaction.id == mined)
            .values(status="confirmed", hash="0x" + "ab" * 32, executor_tx_id="x-1", **common)
        )
        conn.execute(
            update(Transaction)
            .where(Transaction.id == never_sent)
            .values(status="failed", **common)
        )
        conn.execute(  # still on its way: not settled yet
            update(Transaction)
            .where(Transaction.id == waiting)
            .values(status="submitted", executor_tx_id="x-2", **common)
        )
    engine.dispose()
    async_engine = create_engine(consumer_settings)
    try:
        settler = FeeSettler(create_sessionmaker(async_engine), _Chain())  # type: ignore[arg-type]
        assert await settler.run_once() == 2
        assert await settler.run_once() == 0  # once
    finally:
        await async_engine.dispose()
    by_id = {r["id"]: r for r in rows(database_url)}
    assert (by_id[mined]["fee_wei"], by_id[mined]["gas_used"]) == ("210000", 21_000)
    assert (by_id[mined]["block_number"], by_id[mined]["effective_gas_price"]) == (16, "10")
    assert by_id[mined]["reserved_fee_wei"] is None
    assert by_id[never_sent]["fee_wei"] == "0"
    assert by_id[waiting]["reserved_fee_wei"] == "1000000"
    # 3,000,000 reserved: 790,000 back from the mined one, 1,000,000 from the one never sent.
    assert _spend(database_url, client_id)[now][1] == str(3_000_000 - 790_000 - 1_000_000)


class _NoReceipts:
    """A chain that has mined nothing yet."""

    async def receipt(self, tx_hash: str) -> None:
        return None

    async def receipts(self, tx_hashes: list[str]) -> list[None]:
        return [None for _ in tx_hashes]


async def test_rows_without_a_receipt_do_not_hold_up_the_others_and_aged_ones_are_let_go(
    database_url: str, consumer_settings: Any
) -> None:
    """Batches walk the rows in turn: three older rows the chain has no receipt for (more than
    a batch) do not keep a newer, settleable one waiting; a reservation that has left the 24
    hours is let go (no budget counts it any more) with nothing given back."""
    from queue_consumer.tracking.receipts import FeeSettler
    from relay_core.db.engine import create_engine, create_sessionmaker

    *unmined, aged, never_sent = seed_rows(database_url, 5)
    client_id = _client_of(database_url, never_sent)
    _set_policy(database_url, client_id, policy_daily_fee_wei="10000000")
    now = bucket_of(utcnow())
    long_ago = bucket_of(utcnow() - timedelta(hours=25))
    engine = sync_engine(database_url)
    with engine.begin() as conn:
        conn.execute(
            insert(ClientSpend).values(
                client_id=client_id, bucket=now, value_wei="0", fee_wei="4000000"
            )
        )
        for n, tx_id in enumerate(unmined):
            conn.execute(
                update(Transaction)
                .where(Transaction.id == tx_id)
                .values(
                    status="confirmed",
                    hash=f"0x{n:064x}",
                    executor_tx_id=f"x-{n}",
                    spend_bucket=now,
                    reserved_fee_wei="1000000",
                    updated_at=utcnow() - timedelta(minutes=10 - n),
                )
            )
        conn.execute(
            update(Transaction)
            .where(Transaction.id == aged)
            .values(
                status="confirmed",
                hash="0x" + "cd" * 32,
                executor_tx_id="x-aged",
                spend_bucket=long_ago,
                reserved_fee_wei="5000000",
                updated_at=utcnow() - timedelta(minutes=5),
            )
        )
        conn.execute(
            update(Transaction)
            .where(Transaction.id == never_sent)
            .values(status="failed", spend_bucket=now, reserved_fee_wei="1000000")
        )
    engine.dispose()
    async_engine = create_engine(consumer_settings)
    try:
        settler = FeeSettler(create_sessionmaker(async_engine), _NoReceipts(), batch=2)  # type: ignore[arg-type]
        settled = [await settler.run_once() for _ in range(3)]
    finally:
        await async_engine.dispose()
    assert sum(settled) == 2, settled
    by_id = {r["id"]: r for r in rows(database_url)}
    assert by_id[never_sent]["fee_wei"] == "0"
    assert (by_id[aged]["reserved_fee_wei"], by_id[aged]["fee_wei"]) == (None, None)
    assert by_id[aged]["fee_settled_at"] is not None
    assert all(by_id[tx_id]["reserved_fee_wei"] == "1000000" for tx_id in unmined)
    # Only the one never sent gave its reservation back; the aged one was in no window.
    assert _spend(database_url, client_id)[now][1] == str(4_000_000 - 1_000_000)
