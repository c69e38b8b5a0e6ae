"""Packed messages (several transactions of one request, relay_core.queue) through one
consumer against real SQS, MariaDB, Redis and the relayer-stub: each transaction is worked on
as if it had come alone, once, and the packed message is deleted when all are settled."""

from __future__ import annotations

from typing import Any

from consumer_testkit import (
    Stub,
    body_of,
    queue_depth,
    queue_empty,
    receive_some,
    rows,
    seed_rows,
    send_packed_messages,
    status_counts,
    wait_until,
)

from relay_core import tracing

TRACE = tracing.Trace(request_id="req-batch", trace_id="ab" * 16, span_id="cd" * 8, sampled=True)


async def test_a_batchs_packed_messages_submit_each_transaction_once(
    database_url: str, sqs: Any, queues: tuple[str, str], stub: Stub, run_consumer: Any
) -> None:
    ids = seed_rows(database_url, 25)
    assert await send_packed_messages(sqs, queues[0], ids, TRACE) == 3  # 10, 10 and 5
    consumer = await run_consumer()
    await wait_until(lambda: status_counts(database_url) == {"submitted": 25}, 30, "25 submitted")
    await wait_until(lambda: queue_empty(sqs, queues[0]), 15, "the packed messages deleted")
    assert stub.ledger_count() == 25
    assert consumer.stats.counts["received"] == 25  # one piece of work per transaction
    assert await queue_depth(sqs, queues[1]) == 0
    assert all(row["attempts"] == 1 and row["claimed_by"] is None for row in rows(database_url))


async def test_a_refused_transaction_is_dead_lettered_alone_and_the_others_submitted(
    database_url: str, sqs: Any, queues: tuple[str, str], stub: Stub, run_consumer: Any
) -> None:
    rejected = "0x00000000000000000000000000000000000bad01"
    stub.faults(reject_to=[rejected])
    good = "0x000000000000000000000000000000000000dEaD"
    ids = seed_rows(
        database_url,
        6,
        request=lambda i: {"to": rejected if i == 2 else good, "data": f"0x{i:08x}", "value": "0"},
    )
    await send_packed_messages(sqs, queues[0], ids, TRACE)
    await run_consumer()
    await wait_until(
        lambda: status_counts(database_url) == {"submitted": 5, "failed": 1}, 30, "settled"
    )
    await wait_until(lambda: queue_empty(sqs, queues[0]), 15, "the packed message deleted")
    (letter,) = await receive_some(sqs, queues[1], expect=1)
    body = body_of(letter)
    assert body["schemaVersion"] == 1  # its own message, naming it alone
    assert body["transactionId"] == ids[2]
    assert letter["MessageAttributes"]["deadLetterKind"]["StringValue"] == "permanent"
    assert letter["MessageAttributes"]["requestId"]["StringValue"] == "req-batch"
    assert stub.ledger_count() == 5


async def test_a_transaction_that_must_wait_goes_on_alone_and_none_runs_twice(
    database_url: str, sqs: Any, queues: tuple[str, str], stub: Stub, run_consumer: Any
) -> None:
    stub.faults(error_next=1, scope="submit")  # the first submit answers 5xx: in doubt
    ids = seed_rows(database_url, 8)
    await send_packed_messages(sqs, queues[0], ids, TRACE)
    consumer = await run_consumer()
    await wait_until(lambda: status_counts(database_url) == {"submitted": 8}, 60, "8 submitted")
    await wait_until(lambda: queue_empty(sqs, queues[0]), 30, "every message deleted")
    assert stub.ledger_count() == 8
    assert consumer.stats.counts["backoff"] >= 1  # the one that failed went on in a copy
    assert consumer.stats.counts["received"] >= 9
