"""A client's cancel that reached a transaction while a consumer held it (the API's DELETE
writes ``cancel_requested_at``): never sent if the attempt had sent nothing; canceled at the
executor, at once, if the attempt had; nothing sent twice either way."""

from __future__ import annotations

from typing import Any

from consumer_testkit import (
    Stub,
    rows,
    seed_rows,
    send_messages,
    set_rows,
    status_counts,
    sync_engine,
    wait_until,
)
from sqlalchemy import select, update

from relay_core.db.models import Notification, Transaction, TransactionEvent, utcnow


async def test_a_cancel_asked_for_before_the_executor_call_is_carried_out_without_it(
    database_url: str, sqs: Any, queues: tuple[str, str], stub: Stub, run_consumer: Any
) -> None:
    """As when an earlier attempt held the row and gave it back (or was reaped) with nothing
    sent: the next attempt cancels it instead of sending it."""
    ids = seed_rows(database_url, 5)
    set_rows(database_url, ids[:3], cancel_requested_at=utcnow())
    await send_messages(sqs, queues[0], ids)
    await run_consumer()
    await wait_until(
        lambda: status_counts(database_url) == {"canceled": 3, "submitted": 2}, 30, "decided"
    )
    assert stub.ledger_count() == 2, "a canceled transaction reached the executor"
    by_id = {r["id"]: r for r in rows(database_url)}
    for tx_id in ids[:3]:
        assert by_id[tx_id]["cancel_requested_at"] is None
        assert by_id[tx_id]["error"] == "canceled by its client before it was sent"
        assert by_id[tx_id]["executor_tx_id"] is None


async def test_a_cancel_asked_for_during_the_executor_call_goes_to_the_executor(
    database_url: str, sqs: Any, queues: tuple[str, str], stub: Stub, run_consumer: Any
) -> None:
    """The API found the row ``processing`` (claimed, the call under way) and wrote its
    request; the consumer records the executor's answer and cancels it there at once (the
    tracker is off: no later look does it), each sent once."""
    stub.lifecycle(paused=True)  # the executor keeps what it takes pending
    stub.faults(latency={"dist": "fixed", "ms": 2500}, scope="submit")  # within the timeout
    ids = seed_rows(database_url, 4)
    set_rows(database_url, ids, callback_url="http://127.0.0.1:9/hook")
    await send_messages(sqs, queues[0], ids)
    await run_consumer(executor_timeout_s=6, tracker_enabled=False)
    await wait_until(
        lambda: status_counts(database_url) == {"processing": 4}, 30, "claimed, calls under way"
    )
    _request_cancel(database_url, ids[:2])
    await wait_until(lambda: status_counts(database_url) == {"submitted": 4}, 30, "recorded")
    await wait_until(
        lambda: {e["status"] for e in stub.ledger()[1]} == {"canceled", "pending"}, 10, "canceled"
    )
    # The executor answers the cancel before the consumer writes down that it was handed over.
    await wait_until(
        lambda: all(r["cancel_requested_at"] is None for r in rows(database_url)),
        10,
        "the cancels recorded as handed over",
    )
    _, ledger = stub.ledger()
    assert len(ledger) == 4, "each sent once"
    statuses = {entry["id"]: entry["status"] for entry in ledger}
    by_id = {r["id"]: r for r in rows(database_url)}
    for tx_id in ids:
        assert by_id[tx_id]["attempts"] == 1
        assert by_id[tx_id]["cancel_requested_at"] is None
    assert [statuses[by_id[i]["executor_tx_id"]] for i in ids] == [
        "canceled",
        "canceled",
        "pending",
        "pending",
    ]
    # The cancel handed over is a step the client is told of: an event and a callback.
    engine = sync_engine(database_url)
    with engine.connect() as conn:
        for tx_id in ids:
            steps = conn.execute(
                select(TransactionEvent.from_status, TransactionEvent.source).where(
                    TransactionEvent.transaction_id == tx_id,
                    TransactionEvent.to_status == TransactionEvent.from_status,
                )
            ).all()
            told = [
                payload["event"]
                for payload in conn.execute(
                    select(Notification.payload).where(Notification.transaction_id == tx_id)
                ).scalars()
            ]
            if tx_id in ids[:2]:
                assert [tuple(step) for step in steps] == [("submitted", "consumer")]
                assert told.count("transaction.cancel_sent") == 1, told
            else:
                assert steps == []
                assert "transaction.cancel_sent" not in told
    engine.dispose()


async def test_a_cancel_left_standing_is_carried_out_by_the_tracker(
    database_url: str, sqs: Any, queues: tuple[str, str], stub: Stub, run_consumer: Any
) -> None:
    """The executor did not answer the consumer's cancel (or it moved the row meanwhile): the
    request stands on a submitted row, and the tracker's next look cancels it; the row ends
    ``canceled`` from the executor's own status."""
    stub.lifecycle(paused=True)
    ids = seed_rows(database_url, 3)
    await send_messages(sqs, queues[0], ids)
    await run_consumer(tracker_interval_s=0.5, tracker_stale_s=1)
    await wait_until(lambda: status_counts(database_url) == {"submitted": 3}, 30, "submitted")
    _request_cancel(database_url, ids[:1])
    await wait_until(
        lambda: status_counts(database_url) == {"canceled": 1, "submitted": 2}, 30, "canceled"
    )
    by_id = {r["id"]: r for r in rows(database_url)}
    assert by_id[ids[0]]["cancel_requested_at"] is None
    assert stub.ledger_count() == 3
    engine = sync_engine(database_url)
    with engine.connect() as conn:
        moves = conn.execute(
            select(TransactionEvent.to_status).where(TransactionEvent.transaction_id == ids[0])
        ).scalars()
        assert list(moves)[-2:] == ["submitted", "canceled"]
    engine.dispose()


def _request_cancel(database_url: str, ids: list[str]) -> None:
    """What the API's DELETE writes for a row it cannot cancel there and then: a touch."""
    engine = sync_engine(database_url)
    with engine.begin() as conn:
        conn.execute(
            update(Transaction)
            .where(Transaction.id.in_(ids))
            .values(cancel_requested_at=utcnow(), version=Transaction.version + 1)
        )
    engine.dispose()
