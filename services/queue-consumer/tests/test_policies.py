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
from sqlalchemy import insert, update

from relay_core.db.models import ApiClient, ClientSpend, Transaction, utcnow
from relay_core.policy import bucket_of

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
