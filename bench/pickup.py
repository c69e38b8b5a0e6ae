"""Pickup latency against one relay API process (``bench.api``): requests POSTed at a low rate
with one consumer running; commit → claim is the row's ``created_at`` (set just before the
INSERT, so it errs high by the commit) to its first ``processing`` event. ``pickup`` measures
it at light load, ``fast_pickup`` for fast-lane requests while the normal lane holds a
backlog."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime
from typing import Any

from bench import infra, seed, stub
from bench.api import BODY, ApiServer, query
from bench.infra import Run, check
from bench.loadgen import latency_summary
from relay_core.db.models import utcnow

# Asking for speed fast puts a request in the fast lane.
FAST_BODY = json.dumps(
    {"to": infra.DEAD, "data": "0x", "value": "1", "gasLimit": "100000", "speed": "fast"}
)


def start_pickup_consumer(run: Run, server: ApiServer) -> Any:
    return run.spawn_consumer(
        server.database_url,
        server.queue_name,
        0,
        tracker_enabled="false",
        notify_enabled="false",
    )


async def _claimed(
    server: ApiServer,
    since: datetime,
    samples: int,
    consumer: Any,
    what: str,
    *,
    timeout_s: float,
    lane: str | None = None,
) -> list[Any]:
    """(id, created_at, first claimed at) of the rows accepted since ``since`` (in ``lane``),
    once ``samples`` of them have all been claimed."""
    sql = (
        "SELECT t.id, t.created_at, MIN(e.created_at) FROM transactions t "
        "LEFT JOIN transaction_events e ON e.transaction_id = t.id "
        "AND e.to_status = 'processing' WHERE t.created_at >= :since "
        "AND (:lane IS NULL OR t.lane = :lane) GROUP BY t.id"
    )
    deadline = time.monotonic() + timeout_s
    while True:
        rows = query(server.database_url, sql, since=since, lane=lane)
        if len(rows) >= samples and all(r[2] is not None for r in rows):
            return rows
        check(time.monotonic() < deadline, f"{what}: {len(rows)} rows claimed in {timeout_s} s")
        check(consumer.poll() is None, f"{what}: the consumer exited")
        await asyncio.sleep(0.25)


async def _submit(
    run: Run, server: ApiServer, body: Any, rate: float, samples: int, name: str
) -> dict[str, Any]:
    """``samples`` direct submissions at ``rate``, every one accepted."""
    load = await infra.run_loadgen(
        run,
        server.spec(
            method="POST",
            path="/api/v1/relay/direct",
            body=body,
            rate=rate,
            count=samples,
            expect_status=[202],
        ),
        name,
    )
    check(load["error_count"] == 0, f"{name}: accept errors {load['errors']}")
    return dict(load)


async def pickup(
    run: Run, server: ApiServer, *, samples: int, rate: float, consumer: Any = None
) -> dict[str, Any]:
    assert run.stub is not None
    await stub.stub_configure(run.stub, 0)
    consumer = consumer or start_pickup_consumer(run, server)
    try:
        await run.wait_consumer_polling(server.queue_name, 0, consumer)
        await asyncio.sleep(1.0)  # every poller is inside its long poll
        since: datetime = utcnow()
        load = await _submit(run, server, BODY, rate, samples, "pickup")
        rows = await _claimed(server, since, samples, consumer, "pickup", timeout_s=60)
    finally:
        await run.stop_async(consumer, 60)
    pickups = [(claimed - created).total_seconds() * 1000 for _, created, claimed in rows]
    return {
        "samples": len(pickups),
        "offered_rate": rate,
        "pickup_ms": latency_summary(pickups),
        "accept_latency_ms": load["latency_ms"],
    }


async def fast_pickup(
    run: Run, server: ApiServer, *, backlog: int, samples: int, rate: float
) -> dict[str, Any]:
    """Accept → first claim of fast-lane requests while the normal lane holds ``backlog``
    messages that one consumer (executor at 0 ms) is working through."""
    assert run.stub is not None
    await stub.stub_configure(run.stub, 0)
    ids = seed.seed_rows(server.database_url, backlog, client_id=server.client_id)
    async with run.sqs_client(server.queue_name) as sqs:
        url = (await sqs.get_queue_url(QueueName=server.queue_name))["QueueUrl"]
        await seed.send_messages(sqs, url, ids)
    consumer = start_pickup_consumer(run, server)
    try:
        await run.wait_consumer_polling(server.queue_name, 0, consumer)
        since: datetime = utcnow()
        await _submit(run, server, FAST_BODY, rate, samples, "fast-pickup")
        rows = await _claimed(
            server, since, samples, consumer, "fast pickup", timeout_s=120, lane="fast"
        )
        waiting = query(
            server.database_url,
            "SELECT COUNT(*) FROM transactions WHERE status = 'pending' AND lane = 'normal'",
        )[0][0]
    finally:
        await run.stop_async(consumer, 60)
    pickups = [(claimed - created).total_seconds() * 1000 for _, created, claimed in rows]
    return {
        "backlog": backlog,
        "samples": len(pickups),
        "offered_rate": rate,
        "pickup_ms": latency_summary(pickups),
        "normal_still_pending": int(waiting),
    }
