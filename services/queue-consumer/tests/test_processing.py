"""One consumer (in this process) against real SQS, MariaDB, Redis and the relayer-stub."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from typing import Any

from consumer_testkit import (
    DEAD,
    Stub,
    body_of,
    events,
    queue_depth,
    receive_some,
    rows,
    seed_rows,
    send_messages,
    status_counts,
    sync_engine,
    wait_until,
)
from sqlalchemy import update

from queue_consumer.settings import ConsumerSettings
from relay_core import cache as cache_mod
from relay_core import jsonutil
from relay_core import queue as queue_mod
from relay_core.db.models import Transaction, utcnow


async def test_transactions_are_submitted_recorded_and_their_messages_deleted(
    database_url: str,
    sqs: Any,
    queues: tuple[str, str],
    stub: Stub,
    run_consumer: Any,
    consumer_settings: ConsumerSettings,
) -> None:
    ids = seed_rows(database_url, 30)
    await send_messages(sqs, queues[0], ids)
    await run_consumer()
    await wait_until(lambda: status_counts(database_url) == {"submitted": 30}, 30, "30 submitted")
    assert stub.ledger_count() == 30
    await wait_until(lambda: _empty(sqs, queues[0]), 10, "queue drained")
    row = next(r for r in rows(database_url) if r["id"] == ids[0])
    assert row["executor_tx_id"] is not None
    assert row["submitted_at"] is not None
    # The executor's answer counts as hearing of it: the tracker waits its stale time.
    assert row["last_synced_at"] == row["submitted_at"]
    assert row["claimed_by"] is None
    assert row["attempts"] == 1
    assert [(e["from_status"], e["to_status"]) for e in events(database_url, ids[0])] == [
        ("pending", "processing"),
        ("processing", "submitted"),
    ]
    # Redis was written through after MySQL, with the row's version.
    redis = cache_mod.connect(consumer_settings.redis_url or "", 1.0)
    cache = cache_mod.StatusCache(redis, consumer_settings.redis_prefix)
    cached = await cache.get(ids[0])
    await redis.aclose()
    assert cached is not None
    assert cached[0] == row["version"]
    assert cached[1]["status"] == "submitted"


async def _empty(sqs: Any, queue_url: str) -> bool:
    return await queue_depth(sqs, queue_url) == 0


async def test_a_duplicated_message_leads_to_one_submission(
    database_url: str, sqs: Any, queues: tuple[str, str], stub: Stub, run_consumer: Any
) -> None:
    ids = seed_rows(database_url, 5)
    for _ in range(3):
        await send_messages(sqs, queues[0], ids)
    await run_consumer()
    await wait_until(lambda: status_counts(database_url) == {"submitted": 5}, 30, "5 submitted")
    await wait_until(lambda: _empty(sqs, queues[0]), 15, "duplicates deleted")
    assert stub.ledger_count() == 5


async def test_copies_of_a_message_in_one_receive_batch_lead_to_one_submission(
    database_url: str, sqs: Any, queues: tuple[str, str], stub: Stub, run_consumer: Any
) -> None:
    # Copies received together, and every status write committed on its own (one writer,
    # batches of one), so the copies' claims run one after the other.
    ids = seed_rows(database_url, 3)
    for copies in (ids, ids[:2], ids[1:2]):  # all queued before the consumer polls
        await send_messages(sqs, queues[0], copies)
    await run_consumer(consumer_db_writers=1, consumer_write_batch=1)
    await wait_until(lambda: status_counts(database_url) == {"submitted": 3}, 30, "3 submitted")
    await wait_until(lambda: _empty(sqs, queues[0]), 15, "copies deleted")
    assert stub.ledger_count() == 3


async def test_accept_then_hang_is_reconciled_not_resubmitted(
    database_url: str, sqs: Any, queues: tuple[str, str], stub: Stub, run_consumer: Any
) -> None:
    stub.faults(hang_next=1, hang_s=6, scope="submit")
    ids = seed_rows(database_url, 1)
    await send_messages(sqs, queues[0], ids)
    await run_consumer()
    await wait_until(lambda: status_counts(database_url) == {"submitted": 1}, 40, "adopted")
    count, entries = stub.ledger()
    assert count == 1
    row = rows(database_url)[0]
    assert row["executor_tx_id"] == entries[0]["id"]
    assert row["attempts"] >= 2  # the first attempt timed out, a later one adopted


async def test_5xx_storm_backs_off_then_succeeds_once(
    database_url: str,
    sqs: Any,
    queues: tuple[str, str],
    stub: Stub,
    run_consumer: Any,
    consumer_settings: ConsumerSettings,
) -> None:
    stub.faults(error_next=2, scope="submit")
    roomier = consumer_settings.model_copy(update={"queue_max_receive_count": 5})
    await queue_mod.create_queues(sqs, roomier)  # the redrive must allow the retries too
    ids = seed_rows(database_url, 1)
    await send_messages(sqs, queues[0], ids)
    started = time.monotonic()
    consumer = await run_consumer(queue_max_receive_count=5)
    await wait_until(lambda: status_counts(database_url) == {"submitted": 1}, 60, "recovered")
    assert stub.ledger_count() == 1
    # Two 5xx (in doubt: the executor may have recorded them), a look-up while they settle,
    # then one submit. Each retry waited for its back-off: the message came back 3+ times.
    assert rows(database_url)[0]["attempts"] >= 3
    assert consumer.stats.counts["backoff"] >= 2
    assert time.monotonic() - started >= 2


async def test_executor_4xx_fails_at_once_with_reason_and_one_dlq_message(
    database_url: str, sqs: Any, queues: tuple[str, str], stub: Stub, run_consumer: Any
) -> None:
    rejected = "0x00000000000000000000000000000000000bad01"
    stub.faults(reject_to=[rejected])
    ids = seed_rows(database_url, 1, request=lambda i: {"to": rejected, "data": "0x", "value": "0"})
    await send_messages(sqs, queues[0], ids)
    await run_consumer()
    await wait_until(lambda: status_counts(database_url) == {"failed": 1}, 30, "failed")
    row = rows(database_url)[0]
    assert row["attempts"] == 1
    assert "rejected" in row["error"]
    assert events(database_url)[-1]["source"] == "consumer.dlq"
    dlq = await receive_some(sqs, queues[1])
    assert len(dlq) == 1
    assert body_of(dlq[0])["transactionId"] == ids[0]
    assert dlq[0]["MessageAttributes"]["deadLetterKind"]["StringValue"] == "permanent"
    assert "rejected" in dlq[0]["MessageAttributes"]["deadLetterReason"]["StringValue"]
    assert stub.ledger_count() == 0
    await wait_until(lambda: _empty(sqs, queues[0]), 10, "main queue empty")


async def test_poison_message_goes_to_the_dlq_and_the_consumer_keeps_going(
    database_url: str, sqs: Any, queues: tuple[str, str], stub: Stub, run_consumer: Any
) -> None:
    await sqs.send_message(QueueUrl=queues[0], MessageBody="{not json")
    await sqs.send_message(
        QueueUrl=queues[0],
        MessageBody=jsonutil.dumps({"schemaVersion": 9, "transactionId": str(uuid.uuid4())}),
    )
    await run_consumer()
    ids = seed_rows(database_url, 2)
    await send_messages(sqs, queues[0], ids)
    await wait_until(lambda: status_counts(database_url) == {"submitted": 2}, 30, "still working")
    dlq = await receive_some(sqs, queues[1], expect=2)
    reasons = sorted(m["MessageAttributes"]["deadLetterReason"]["StringValue"] for m in dlq)
    assert reasons == ["body is not JSON", "unknown schemaVersion 9"]
    assert {m["MessageAttributes"]["deadLetterKind"]["StringValue"] for m in dlq} == {"poison"}


async def test_expired_before_submission_is_marked_expired_and_never_sent(
    database_url: str, sqs: Any, queues: tuple[str, str], stub: Stub, run_consumer: Any
) -> None:
    ids = seed_rows(database_url, 1, valid_until_in_s=-1)
    await send_messages(sqs, queues[0], ids)
    await run_consumer()
    await wait_until(lambda: status_counts(database_url) == {"expired": 1}, 30, "expired")
    assert stub.ledger_count() == 0


async def test_gasless_is_sent_as_forwarder_execute_with_gas_overhead(
    database_url: str,
    sqs: Any,
    queues: tuple[str, str],
    stub: Stub,
    run_consumer: Any,
    consumer_settings: ConsumerSettings,
) -> None:
    from eth_account import Account

    from relay_core import ethereum

    account = Account.create()
    forwarder = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
    domain = ethereum.ForwarderDomain("ERC2771Forwarder", "1", 31337, forwarder)
    forward = ethereum.ForwardRequest(account.address, DEAD, 0, 100_000, 0, 2**40, "0x1234")
    signature = ethereum.sign_forward_request(domain, forward, account.key)
    request = {
        "request": {
            "from": account.address,
            "to": DEAD,
            "value": "0",
            "gas": "100000",
            "nonce": "0",
            "deadline": 2**40,
            "data": "0x1234",
        },
        "signature": signature,
        "forwarder": forwarder,
        "chainId": 31337,
    }
    ids = seed_rows(database_url, 1, tx_type="gasless", request=lambda i: request)
    await send_messages(sqs, queues[0], ids, tx_type="gasless")
    await run_consumer()
    await wait_until(lambda: status_counts(database_url) == {"submitted": 1}, 30, "submitted")
    count, entries = stub.ledger()
    assert count == 1
    entry = entries[0]
    assert entry["to"].lower() == forwarder.lower()
    assert entry["data"] == ethereum.forwarder_execute_calldata(forward, signature)
    assert entry["request"]["gas_limit"] == 100_000 + consumer_settings.forwarder_gas_overhead


async def test_work_longer_than_half_the_visibility_timeout_keeps_the_message_hidden(
    database_url: str, sqs: Any, queues: tuple[str, str], stub: Stub, run_consumer: Any
) -> None:
    stub.faults(latency={"dist": "fixed", "ms": 5000}, scope="submit")
    ids = seed_rows(database_url, 1)
    await send_messages(sqs, queues[0], ids)
    consumer = await run_consumer(executor_timeout_s=10.0, consumer_message_timeout_s=20.0)
    await wait_until(lambda: status_counts(database_url) == {"submitted": 1}, 30, "submitted")
    assert stub.ledger_count() == 1
    assert consumer.stats.counts["heartbeats"] >= 1
    assert consumer.stats.counts["received"] == 1  # never redelivered meanwhile


async def test_reaper_returns_stale_claims_to_pending_for_the_sweeper(
    database_url: str, stub: Stub, run_consumer: Any, queues: tuple[str, str]
) -> None:
    ids = seed_rows(database_url, 2)
    engine = sync_engine(database_url)
    with engine.begin() as conn:
        conn.execute(
            update(Transaction)
            .where(Transaction.id == ids[0])
            .values(
                status="processing",
                claimed_by="dead-worker",
                claimed_at=utcnow() - timedelta(hours=1),
            )
        )
    engine.dispose()
    await run_consumer(consumer_stale_claim_s=60)
    await wait_until(lambda: status_counts(database_url) == {"pending": 2}, 10, "reaped")
    row = next(r for r in rows(database_url) if r["id"] == ids[0])
    assert row["enqueued_at"] is None  # the API's sweeper will send it again
    assert row["claimed_by"] is None
    assert events(database_url, ids[0])[-1]["source"] == "reaper"
