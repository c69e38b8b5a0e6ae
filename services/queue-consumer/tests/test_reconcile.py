"""The reconciler: rows whose message is gone are enqueued again, rows whose message was
dead-lettered get a record, rows the executor lost get a final status; nothing is left in a
non-final state without a watcher."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from datetime import timedelta
from typing import Any

from consumer_testkit import (
    Stub,
    events,
    process_env,
    queue_depth,
    rows,
    seed_rows,
    send_messages,
    set_rows,
    status_counts,
    submit_to_stub,
    wait_until,
)

from queue_consumer.settings import ConsumerSettings
from relay_core import queue as queue_mod
from relay_core.db.engine import create_engine, create_sessionmaker
from relay_core.db.models import utcnow
from relay_core.reconcile import Reconciler

LONG_AGO = timedelta(hours=3)
SOON = timedelta(seconds=1)


async def _reconcile_once(
    settings: ConsumerSettings, sqs: Any, queues: tuple[str, str]
) -> dict[str, Any]:
    engine = create_engine(settings)
    try:
        reconciler = Reconciler(create_sessionmaker(engine), sqs, {"normal": queues}, settings)
        return (await reconciler.run_once()).summary()
    finally:
        await engine.dispose()


async def test_pending_rows_whose_message_was_lost_are_enqueued_again_and_executed_once(
    database_url: str, sqs: Any, queues: tuple[str, str], stub: Stub, run_consumer: Any
) -> None:
    lost = seed_rows(database_url, 5)  # enqueued, but their messages are gone
    set_rows(database_url, lost, enqueued_at=utcnow() - LONG_AGO)
    fresh = seed_rows(database_url, 3)  # just enqueued: their messages are on the way
    await run_consumer(consumer_reconcile_interval_s=0.5)
    await wait_until(
        lambda: status_counts(database_url) == {"submitted": 5, "pending": 3}, 30, "reconciled"
    )
    assert stub.ledger_count() == 5
    await send_messages(sqs, queues[0], fresh)
    await wait_until(lambda: status_counts(database_url) == {"submitted": 8}, 30, "all done")
    assert stub.ledger_count() == 8


async def test_a_row_dead_lettered_twice_is_failed_with_a_record_and_its_nonce_released(
    database_url: str,
    sqs: Any,
    queues: tuple[str, str],
    consumer_settings: ConsumerSettings,
) -> None:
    first_time, never_sent, in_doubt = seed_rows(database_url, 3)
    set_rows(database_url, [first_time], enqueued_at=utcnow() - LONG_AGO)
    set_rows(
        database_url,
        [never_sent],
        enqueued_at=utcnow() - LONG_AGO,
        inflight_key="0xabc:7",
        dead_letters=1,  # found dead-lettered before, and enqueued again then
    )
    set_rows(
        database_url,
        [in_doubt],
        enqueued_at=utcnow() - LONG_AGO,
        inflight_key="0xabc:8",
        submit_started_at=utcnow() - LONG_AGO,
    )
    # As the redrive policy leaves them: the bodies in the DLQ without our attributes.
    await send_messages(sqs, queues[1], [first_time, never_sent, in_doubt])

    report = await _reconcile_once(consumer_settings, sqs, queues)

    assert report["deadLettered"] == 1
    assert report["requeued"] == 2
    by_id = {r["id"]: r for r in rows(database_url)}
    # The first time, a consumer killed on the last receive is as likely as a poison row.
    assert (by_id[first_time]["status"], by_id[first_time]["dead_letters"]) == ("pending", 1)
    failed = by_id[never_sent]
    assert failed["status"] == "failed"
    assert failed["error"].startswith("dead_lettered: moved to the DLQ by the redrive policy")
    assert failed["inflight_key"] is None
    assert events(database_url, never_sent)[-1]["source"] == "consumer.dlq"
    # An earlier submit may have reached the executor: never failed on a guess, enqueued
    # again so a consumer looks it up.
    assert by_id[in_doubt]["status"] == "pending"
    assert by_id[in_doubt]["enqueued_at"] > utcnow() - timedelta(minutes=1)
    # Both messages are left in the DLQ, visible, for the operator.
    attributes = await sqs.get_queue_attributes(
        QueueUrl=queues[1], AttributeNames=["ApproximateNumberOfMessages"]
    )
    assert attributes["Attributes"]["ApproximateNumberOfMessages"] == "3"
    # A second pass finds nothing more to do.
    assert (await _reconcile_once(consumer_settings, sqs, queues))["deadLettered"] == 0


async def test_a_transaction_the_executor_lost_is_failed_after_the_configured_time(
    database_url: str, sqs: Any, queues: tuple[str, str], stub: Stub, run_consumer: Any
) -> None:
    known, lost = seed_rows(database_url, 2)
    (executor_id,) = submit_to_stub(
        stub, [{"to": "0x000000000000000000000000000000000000dEaD", "data": "0x", "value": "0"}]
    )
    now = utcnow()
    common = {"status": "submitted", "submitted_at": now, "last_synced_at": now - LONG_AGO}
    set_rows(database_url, [known], executor_tx_id=executor_id, **common)
    set_rows(database_url, [lost], executor_tx_id="gone-0000", hash="0x" + "ab" * 32, **common)
    await run_consumer(
        tracker_interval_s=0.2,
        tracker_stale_s=0.2,
        consumer_reconcile_interval_s=0.5,
        reconcile_missing_after_s=2,
    )
    await wait_until(
        lambda: status_counts(database_url) == {"submitted": 1, "failed": 1}, 30, "given up"
    )
    by_id = {r["id"]: r for r in rows(database_url)}
    assert by_id[known]["upstream_missing_since"] is None
    error = by_id[lost]["error"]
    assert "the executor lost this transaction" in error
    assert "check hash 0x" + "ab" * 32 + " on chain" in error
    assert events(database_url, lost)[-1]["source"] == "reconciler"


async def test_relay_reconcile_once_runs_one_pass_and_says_what_it_did(
    database_url: str, sqs: Any, queues: tuple[str, str], consumer_env: dict[str, Any]
) -> None:
    lost = seed_rows(database_url, 3)
    set_rows(database_url, lost, enqueued_at=utcnow() - LONG_AGO)
    result = subprocess.run(
        [sys.executable, "-m", "relay_api.cli", "reconcile", "--once"],
        env=process_env(consumer_env),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "examined 3 row(s): 3 enqueued again, 0 failed as dead-lettered" in result.stdout
    assert await queue_depth(sqs, queues[0]) == 3
    assert all(r["enqueued_at"] > utcnow() - timedelta(minutes=1) for r in rows(database_url))


async def test_rows_sent_to_a_queue_that_was_made_again_are_enqueued_again_at_once(
    database_url: str, sqs: Any, queues: tuple[str, str], consumer_settings: ConsumerSettings
) -> None:
    engine = create_engine(consumer_settings)
    reconciler = Reconciler(create_sessionmaker(engine), sqs, {"normal": queues}, consumer_settings)
    try:
        assert (await reconciler.requeue_lost()).requeued == 0  # the queue as first seen
        pending = seed_rows(database_url, 4)
        unclaimed, claimed, submitted = seed_rows(database_url, 3)
        set_rows(database_url, [unclaimed], status="processing", attempts=1)
        set_rows(
            database_url, [claimed], status="processing", claimed_by="m@c", claimed_at=utcnow()
        )
        set_rows(database_url, [submitted], status="submitted", executor_tx_id="x-1")
        assert (await reconciler.requeue_lost()).requeued == 0  # the same queue: nothing lost
        await asyncio.sleep(1.1)  # SQS keeps a queue's creation time in whole seconds
        # The SQS server lost its state: the queue exists again, empty.
        await sqs.delete_queue(QueueUrl=queues[0])
        await queue_mod.create_lane(sqs, consumer_settings, "normal")
        report = await reconciler.requeue_lost()
        assert report.requeued == 5
        assert await queue_depth(sqs, queues[0]) == 5
        again = {r["id"] for r in rows(database_url) if r["enqueued_at"] > utcnow() - SOON}
        assert again == {*pending, unclaimed}
        assert (await reconciler.requeue_lost()).requeued == 0  # once
    finally:
        await engine.dispose()


async def test_a_consumer_started_after_the_queue_was_made_again_enqueues_what_it_lost(
    database_url: str, sqs: Any, queues: tuple[str, str], consumer_settings: ConsumerSettings
) -> None:
    """The SQS server came back empty before this consumer started (a whole restart, or a
    consumer slow to start): its first look at the queue finds rows enqueued before the queue
    existed, whose messages died with the old server, and enqueues them again at once rather
    than after reconcile_pending_after_s (two hours)."""
    pending = seed_rows(database_url, 3)
    set_rows(database_url, pending, enqueued_at=utcnow() - timedelta(seconds=30))
    claimed = seed_rows(database_url, 1)
    set_rows(
        database_url,
        claimed,
        status="processing",
        claimed_by="m@c",
        claimed_at=utcnow(),
        enqueued_at=utcnow() - timedelta(seconds=30),
    )
    await sqs.delete_queue(QueueUrl=queues[0])
    await queue_mod.create_lane(sqs, consumer_settings, "normal")
    engine = create_engine(consumer_settings)
    reconciler = Reconciler(create_sessionmaker(engine), sqs, {"normal": queues}, consumer_settings)
    try:
        report = await reconciler.requeue_lost()
        assert report.requeued == 3  # not the row a consumer is working on
        assert await queue_depth(sqs, queues[0]) == 3
        assert (await reconciler.requeue_lost()).requeued == 0  # once
    finally:
        await engine.dispose()
