"""Outages at the consumer's scale (one consumer in this process, real SQS, MariaDB and the
relayer-stub): the in-doubt lookup decides only on a complete read, one executor transaction
belongs to one row, an unavailable executor opens the circuit and fails nothing, the retry
budget ends what stays unavailable, and no live message is left to the redrive policy.

The same outages at full size, on real processes, are in tests/faults."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from consumer_testkit import (
    DEAD,
    Stub,
    queue_depth,
    rows,
    seed_rows,
    send_messages,
    set_rows,
    status_counts,
    submit_to_stub,
    wait_until,
)
from sqlalchemy.engine import make_url

from queue_consumer.settings import ConsumerSettings
from relay_core import queue as queue_mod
from relay_core.db.models import utcnow
from relay_devstack.localsqs import free_port
from relay_testkit.tcpproxy import TcpProxy

SETTLED = timedelta(seconds=30)  # older than the test consumer's settle time (10.5 s)


def _in_doubt(database_url: str, ids: list[str]) -> None:
    """As if an earlier attempt had stamped the rows, called the executor and died."""
    stamp = utcnow() - SETTLED
    set_rows(
        database_url,
        ids,
        status="processing",
        attempts=1,
        submit_started_at=stamp,
        first_attempt_at=stamp,
        claimed_at=stamp,
    )


async def test_an_incomplete_lookup_never_resubmits_and_a_complete_one_adopts(
    database_url: str, sqs: Any, queues: tuple[str, str], stub: Stub, run_consumer: Any
) -> None:
    ids = seed_rows(database_url, 1)  # its request is to DEAD, data 0x00000000
    _in_doubt(database_url, ids)
    (ours,) = submit_to_stub(stub, [{"to": DEAD, "data": "0x00000000", "value": "0"}])
    # 300 newer transactions: 30 pages of 10, more than the first consumer may read.
    submit_to_stub(stub, [{"to": DEAD, "data": f"0x{i:08x}ff", "value": "0"} for i in range(300)])
    await send_messages(sqs, queues[0], ids)

    short = await run_consumer(executor_list_page_size=10, consumer_lookup_max_pages=3)
    await wait_until(
        lambda: short.pool.member(None).lookup.incomplete >= 2, 30, "two short lookups"
    )
    short.stopping.set()
    await asyncio.sleep(0.5)
    assert stub.ledger_count() == 301, "an incomplete read led to a resubmission"
    row = rows(database_url)[0]
    assert (row["status"], row["executor_tx_id"]) == ("processing", None)

    await run_consumer(executor_list_page_size=10, consumer_lookup_max_pages=100)
    await wait_until(lambda: status_counts(database_url) == {"submitted": 1}, 60, "adopted")
    assert stub.ledger_count() == 301
    assert rows(database_url)[0]["executor_tx_id"] == ours


async def test_rows_with_one_payload_never_share_an_executor_transaction(
    database_url: str, sqs: Any, queues: tuple[str, str], stub: Stub, run_consumer: Any
) -> None:
    same = {"to": DEAD, "data": "0xabcdef", "value": "0"}
    ids = seed_rows(database_url, 2, request=lambda i: same)
    _in_doubt(database_url, ids)
    (reached,) = submit_to_stub(stub, [same])  # only one of the two attempts reached it
    # Each executor answer 300 ms late: the two rows' lookups overlap even when their claims
    # commit apart (milliseconds, as the loop's other work falls), so both choose the same
    # transaction and the unique index lets one have it. (Looking up after the first adopted
    # it, the second would submit afresh: correct too, but not this race.)
    stub.faults(latency=300)
    await send_messages(sqs, queues[0], ids)
    # One poller: both messages come in one receive.
    consumer = await run_consumer(consumer_db_writers=1, consumer_pollers=1)
    await wait_until(lambda: status_counts(database_url) == {"submitted": 2}, 60, "both decided")
    count, entries = stub.ledger()
    assert count == 2  # one adopted, the other submitted afresh
    recorded = sorted(r["executor_tx_id"] for r in rows(database_url))
    assert recorded == sorted(e["id"] for e in entries)
    assert reached in recorded
    assert consumer.submitter.conflicts >= 1


async def test_an_unavailable_executor_opens_the_circuit_receives_nothing_and_fails_nothing(
    database_url: str, sqs: Any, queues: tuple[str, str], stub: Stub, run_consumer: Any
) -> None:
    stub.faults(rate_limit_rate=1.0, rate_limit_after_s=1)
    ids = seed_rows(database_url, 40)
    await send_messages(sqs, queues[0], ids)
    consumer = await run_consumer(consumer_concurrency=10)
    await wait_until(lambda: consumer.breaker.opened >= 1, 30, "the circuit to open")
    received = consumer.stats.counts["received"]
    await asyncio.sleep(4)
    # Open or probing with one message at a time: a handful of receives, not a batch each.
    assert consumer.stats.counts["received"] - received <= 6
    stub.faults()
    await wait_until(lambda: status_counts(database_url) == {"submitted": 40}, 90, "recovered")
    assert stub.ledger_count() == 40
    assert consumer.breaker.closed
    assert await queue_depth(sqs, queues[1]) == 0


async def test_an_executor_down_past_the_retry_budget_fails_with_the_reason(
    database_url: str, sqs: Any, queues: tuple[str, str], stub: Stub, run_consumer: Any
) -> None:
    ids = seed_rows(database_url, 1)
    await send_messages(sqs, queues[0], ids)
    nobody = f"http://127.0.0.1:{free_port()}"  # connection refused: certainly not sent
    await run_consumer(executor_url=nobody, consumer_retry_budget_s=3, circuit_cooldown_s=0.5)
    await wait_until(lambda: status_counts(database_url) == {"failed": 1}, 60, "budget spent")
    row = rows(database_url)[0]
    assert "executor unavailable for 3 s" in row["error"]
    assert row["submit_started_at"] is None  # nothing reached an executor
    dlq = await sqs.receive_message(
        QueueUrl=queues[1], WaitTimeSeconds=2, MessageAttributeNames=["All"]
    )
    (message,) = dlq["Messages"]
    assert message["MessageAttributes"]["deadLetterKind"]["StringValue"] == "exhausted"


async def test_the_last_allowed_receive_requeues_the_message_instead_of_losing_it(
    database_url: str,
    sqs: Any,
    stub: Stub,
    run_consumer: Any,
    consumer_settings: ConsumerSettings,
) -> None:
    # The queue dead-letters after 2 receives although the consumer is configured for 40:
    # it must go by the queue's own policy.
    tight = consumer_settings.model_copy(update={"queue_max_receive_count": 2})
    queue_url, dlq_url = await queue_mod.create_queues(sqs, tight)
    stub.faults(rate_limit_next=3, rate_limit_after_s=1)
    ids = seed_rows(database_url, 1)
    await send_messages(sqs, queue_url, ids)
    consumer = await run_consumer()
    await wait_until(lambda: status_counts(database_url) == {"submitted": 1}, 60, "submitted")
    assert stub.ledger_count() == 1
    assert consumer.stats.counts["requeue"] >= 1
    assert await queue_depth(sqs, dlq_url) == 0


async def test_an_executor_failing_every_call_in_doubt_is_given_up_only_after_a_complete_lookup(
    database_url: str, sqs: Any, queues: tuple[str, str], stub: Stub, run_consumer: Any
) -> None:
    # 500 on every send: each attempt is in doubt (the executor may have it), so it is looked
    # up after it settles; the budget ends it only once a complete read shows nothing there.
    stub.faults(error_rate=1.0, scope="submit")
    ids = seed_rows(database_url, 1)
    await send_messages(sqs, queues[0], ids)
    consumer = await run_consumer(consumer_retry_budget_s=2)
    await wait_until(lambda: status_counts(database_url) == {"failed": 1}, 60, "budget spent")
    row = rows(database_url)[0]
    assert "no attempt got an answer from the executor" in row["error"]
    assert consumer.pool.member(None).lookup.scans >= 1
    assert stub.ledger_count() == 0


async def test_a_database_outage_stops_the_pollers_and_its_own_probe_starts_them_again(
    database_url: str, sqs: Any, queues: tuple[str, str], stub: Stub, run_consumer: Any
) -> None:
    url = make_url(database_url)
    with TcpProxy(url.port or 3306) as proxy:
        through = url.set(port=proxy.port).render_as_string(hide_password=False)
        consumer = await run_consumer(database_url=through)
        proxy.cut()
        ids = seed_rows(database_url, 30)
        await send_messages(sqs, queues[0], ids)
        await wait_until(lambda: consumer.database.opened >= 1, 60, "the database circuit open")
        received = consumer.stats.counts["received"]
        await asyncio.sleep(6)
        assert consumer.stats.counts["received"] == received  # open: nothing is received
        assert consumer.breaker.closed  # the executor's is another matter
        proxy.restore()
        await wait_until(lambda: status_counts(database_url) == {"submitted": 30}, 60, "all done")
    assert consumer.database.closed
    assert stub.ledger_count() == 30
    assert await queue_depth(sqs, queues[1]) == 0
