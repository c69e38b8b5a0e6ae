"""Rows and messages, bypassing the API: API clients and transactions inserted straight into a
scratch database, their SQS messages sent in batches, and how many messages a queue still
holds."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import create_engine, insert

from bench.infra import DEAD, check, sync_url
from relay_core import apikeys
from relay_core import queue as queue_mod
from relay_core.db.models import ApiClient, Transaction, utcnow
from relay_core.spending import bucket_of


def create_client(
    database_url: str,
    key: str | None = None,
    name: str = "bench",
    *,
    spend_policy: str | None = None,
    allowed_to: str = DEAD,
) -> str:
    """Insert an API client (with ``key`` if given) whose rate limit the benchmarks cannot
    reach; returns its id. ``spend_policy``: ``rules`` sets every per-transaction rule of a
    spend policy (``allowed_to`` the one destination allowed), ``budget`` those and a daily
    budget (a reservation on each request), ``fees`` those and a fee budget (``maxFeeWei``,
    ``dailyFeeWei``, the speeds); the benchmark's requests break none of them."""
    engine = create_engine(sync_url(database_url))
    client_id = str(uuid.uuid4())
    secret = key or apikeys.generate_key()
    with engine.begin() as conn:
        conn.execute(
            insert(ApiClient).values(
                id=client_id,
                name=name,
                role="client",
                key_hash=apikeys.hash_key(secret),
                key_prefix=apikeys.display_prefix(secret),
                created_at=utcnow(),
                # Its own rate limit, far above what the load generator sends: the limiter
                # runs on every request (a Redis script call), and never refuses one.
                rate_limit_per_s=1_000_000.0,
                policy_granted_at=utcnow(),
                rate_limit_burst=1_000_000,
                **(
                    {
                        "policy_allowed_to": [allowed_to.lower()],
                        "policy_max_value_wei": str(10**18),
                        "policy_daily_value_wei": str(10**30) if spend_policy != "rules" else None,
                        "policy_max_gas": 1_000_000,
                    }
                    | (
                        {  # a fee budget too: every request is priced and reserves its fee
                            "policy_max_fee_wei": str(10**30),
                            "policy_daily_fee_wei": str(10**30),
                            "policy_speeds": ["average", "fast"],
                        }
                        if spend_policy == "fees"
                        else {}
                    )
                    if spend_policy
                    else {}
                ),
            )
        )
    engine.dispose()
    return client_id


def seed_rows(
    database_url: str,
    count: int,
    *,
    client_id: str | None = None,
    status: str = "pending",
    executor_ids: Sequence[str] | None = None,
    start_index: int = 0,
    to: str = DEAD,
    value: str = "0",
) -> list[str]:
    """Bulk-insert ``count`` transactions (distinct calldata each), like the consumer tests'
    seed_rows. ``executor_ids`` marks them as known to the executor (status refresh)."""
    client_id = client_id or create_client(database_url, name="seed")
    engine = create_engine(sync_url(database_url))
    now = utcnow()
    ids = [str(uuid.uuid4()) for _ in range(count)]
    rows = []
    for i, tx_id in enumerate(ids):
        row: dict[str, Any] = {
            "id": tx_id,
            "client_id": client_id,
            "type": "direct",
            "status": status,
            "version": 1,
            "request": {
                "to": to,
                "data": f"0x{start_index + i:08x}",
                "value": value,
                "gasLimit": "100000",  # what a client under a gas rule names (--spend-policy)
                "speed": "fast",
            },
            "request_fingerprint": uuid.uuid4().hex,
            "attempts": 0 if status == "pending" else 1,
            "enqueued_at": now,
            # reserved in today's budget at accept, as the API records it: the consumer then
            # reserves nothing again (without it, each row takes its reservation at submission)
            "spend_bucket": bucket_of(now),
            "created_at": now - timedelta(seconds=60),
            "updated_at": now - timedelta(seconds=60),
        }
        if executor_ids is not None:
            row["executor_tx_id"] = executor_ids[i]
            row["submitted_at"] = now - timedelta(seconds=60)
        rows.append(row)
    with engine.begin() as conn:
        for start in range(0, len(rows), 1000):
            conn.execute(insert(Transaction), rows[start : start + 1000])
    engine.dispose()
    return ids


async def send_messages(
    sqs: Any,
    queue_url: str,
    ids: Sequence[str],
    senders: int = 8,
    progress: list[int] | None = None,
) -> None:
    """One message per id (batches of 10, a few senders in parallel); ``progress[0]`` counts
    the messages sent so far."""
    messages = [queue_mod.TransactionMessage.new(tx_id, "direct") for tx_id in ids]
    batches = [messages[i : i + 10] for i in range(0, len(messages), 10)]
    position = iter(range(len(batches)))

    async def sender() -> None:
        for index in position:
            sent = await queue_mod.send_batch(sqs, queue_url, batches[index])
            check(len(sent) == len(batches[index]), "SQS refused part of a preload batch")
            if progress is not None:
                progress[0] += len(sent)

    await asyncio.gather(*(sender() for _ in range(senders)))


async def queue_remaining(sqs: Any, queue_url: str) -> int:
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
