"""Helpers for the consumer tests: seed rows and messages directly (bypassing the API),
drive the relayer-stub's admin API, and wait for conditions."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import httpx
from sqlalchemy import create_engine, insert, select, text, update
from sqlalchemy.engine import make_url

from relay_core import jsonutil
from relay_core.db.models import ApiClient, Transaction, TransactionEvent, utcnow
from relay_core.queue import TransactionMessage, pack, send_batch, send_packed
from relay_core.statuses import TxType
from relay_testkit import STUB_DEV_KEY, Stub

__all__ = ["Stub"]

DEAD = "0x000000000000000000000000000000000000dEaD"


def sync_engine(database_url: str) -> Any:
    return create_engine(make_url(database_url).set(drivername="mysql+pymysql"))


def seed_rows(
    database_url: str,
    count: int,
    *,
    tx_type: str = "direct",
    request: Callable[[int], dict[str, Any]] | None = None,
    valid_until_in_s: float | None = None,
) -> list[str]:
    """Insert ``count`` pending transactions, each with distinct calldata (its index)."""
    engine = sync_engine(database_url)
    client_id = str(uuid.uuid4())
    now = utcnow()
    ids = [str(uuid.uuid4()) for _ in range(count)]
    build = request or (lambda i: {"to": DEAD, "data": f"0x{i:08x}", "value": "0", "speed": "fast"})
    rows = [
        {
            "id": tx_id,
            "client_id": client_id,
            "type": tx_type,
            "status": "pending",
            "version": 1,
            "request": build(i),
            "request_fingerprint": uuid.uuid4().hex,
            "attempts": 0,
            "valid_until": (now + timedelta(seconds=valid_until_in_s))
            if valid_until_in_s is not None
            else None,
            "enqueued_at": now,
            "created_at": now,
            "updated_at": now,
        }
        for i, tx_id in enumerate(ids)
    ]
    with engine.begin() as conn:
        conn.execute(
            insert(ApiClient).values(
                id=client_id,
                name="seed",
                role="client",
                key_hash=uuid.uuid4().hex * 2,
                key_prefix="seed",
                created_at=now,
                policy_granted_at=now,  # may spend (with no limits)
            )
        )
        for start in range(0, len(rows), 500):
            conn.execute(insert(Transaction), rows[start : start + 500])
    engine.dispose()
    return ids


async def send_messages(
    sqs: Any, queue_url: str, ids: list[str], tx_type: str = "direct", trace: Any = None
) -> None:
    messages = [TransactionMessage.new(tx_id, tx_type, trace) for tx_id in ids]
    for start in range(0, len(messages), 10):
        sent = await send_batch(sqs, queue_url, messages[start : start + 10])
        assert len(sent) == len(messages[start : start + 10])


async def send_packed_messages(
    sqs: Any, queue_url: str, ids: list[str], trace: Any, tx_type: str = "direct"
) -> int:
    """``ids`` as one request's (``trace``'s) transactions are sent: packed ten to a message
    (relay_core.queue.pack). Returns how many messages carried them."""
    when = "2026-11-28T10:00:00.000Z"
    kind = TxType(tx_type)
    packed = pack(TransactionMessage.many(ids, kind, trace, ["normal"] * len(ids), timestamp=when))
    for start in range(0, len(packed), 10):
        sent = await send_packed(sqs, queue_url, packed[start : start + 10])
        assert len(sent) == sum(len(group) for group in packed[start : start + 10])
    return len(packed)


def rows(database_url: str) -> list[dict[str, Any]]:
    engine = sync_engine(database_url)
    with engine.connect() as conn:
        result = [dict(r._mapping) for r in conn.execute(select(Transaction))]
    engine.dispose()
    return result


def events(database_url: str, transaction_id: str | None = None) -> list[dict[str, Any]]:
    engine = sync_engine(database_url)
    stmt = select(TransactionEvent).order_by(TransactionEvent.id)
    if transaction_id:
        stmt = stmt.where(TransactionEvent.transaction_id == transaction_id)
    with engine.connect() as conn:
        result = [dict(r._mapping) for r in conn.execute(stmt)]
    engine.dispose()
    return result


def status_counts(database_url: str) -> dict[str, int]:
    engine = sync_engine(database_url)
    with engine.connect() as conn:
        result = {
            row[0]: row[1]
            for row in conn.execute(
                text("SELECT status, COUNT(*) FROM transactions GROUP BY status")
            )
        }
    engine.dispose()
    return result


async def wait_until(
    condition: Callable[[], Awaitable[bool] | bool], timeout_s: float, what: str
) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.2)


async def queue_depth(sqs: Any, queue_url: str) -> int:
    attributes = (
        await sqs.get_queue_attributes(
            QueueUrl=queue_url,
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            ],
        )
    )["Attributes"]
    return sum(int(value) for value in attributes.values())


async def queue_empty(sqs: Any, queue_url: str) -> bool:
    return await queue_depth(sqs, queue_url) == 0


async def receive_some(sqs: Any, queue_url: str, expect: int = 1) -> list[Any]:
    """Receive (and hide for a minute) until ``expect`` messages came, or 20 polls passed."""
    found: list[Any] = []
    for _ in range(20):
        response = await sqs.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=1,
            MessageAttributeNames=["All"],
            VisibilityTimeout=60,
        )
        found.extend(response.get("Messages", []))
        if len(found) >= expect:
            break
    return found


def body_of(message: dict[str, Any]) -> dict[str, Any]:
    return dict(jsonutil.loads(message["Body"]))


def process_env(values: dict[str, Any]) -> dict[str, str]:
    """The same settings as environment variables for a consumer process."""
    names = {
        "database_url": "DATABASE_URL",
        "aws_endpoint_url": "AWS_ENDPOINT_URL",
        "redis_url": "REDIS_URL",
        "executor_url": "RELAY_EXECUTOR_URL",
        "environment": "RELAY_ENV",
    }
    env = dict(os.environ)
    for key, value in values.items():
        env[names.get(key, f"RELAY_{key.upper()}")] = str(value)
    return env


def set_rows(database_url: str, ids: list[str], **values: Any) -> None:
    """Put rows in a given state directly (an in-doubt attempt, a lost message, ...)."""
    engine = sync_engine(database_url)
    with engine.begin() as conn:
        conn.execute(update(Transaction).where(Transaction.id.in_(ids)).values(**values))
    engine.dispose()


def submit_to_stub(
    stub: Stub, requests: list[dict[str, Any]], relayer: str = "relayer-1"
) -> list[str]:
    """Send transactions to the executor directly (as an earlier attempt, or other traffic)."""
    ids: list[str] = []
    with httpx.Client(base_url=stub.base_url, timeout=30) as http:
        for request in requests:
            response = http.post(
                f"/api/v1/relayers/{relayer}/transactions",
                json={"speed": "fast", **request},
                headers={"Authorization": f"Bearer {STUB_DEV_KEY}"},
            )
            response.raise_for_status()
            ids.append(response.json()["data"]["id"])
    return ids


async def twenty_good_five_failing(
    database_url: str, stub: Stub, sqs: Any, queue_url: str
) -> tuple[list[str], list[str]]:
    """Webhooks off and a fast lifecycle at the stub; 20 transactions that will confirm and 5
    that the executor fails, enqueued. Returns (good, bad)."""
    stub.webhook(None, None)
    stub.lifecycle(
        paused=False,
        delay_sent_ms=50,
        delay_submitted_ms=50,
        delay_mined_ms=50,
        delay_confirmed_ms=50,
        fail_data_marker="deadbeef",
    )
    good = seed_rows(database_url, 20)
    bad = seed_rows(
        database_url,
        5,
        request=lambda i: {"to": DEAD, "data": f"0xdeadbeef{i:04x}", "value": "0"},
    )
    await send_messages(sqs, queue_url, good + bad)
    return good, bad
