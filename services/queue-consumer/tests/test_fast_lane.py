"""The fast lane: its messages are received and given room before the normal lane's, and the
normal lane keeps its share however busy the fast one is (``lanes.Capacity``)."""

from __future__ import annotations

import asyncio
from typing import Any

from consumer_testkit import rows, seed_rows, send_messages, wait_until

from queue_consumer.lanes import Capacity
from queue_consumer.worker import Consumer
from relay_core import queue as queue_mod
from relay_core.settings import InfraSettings


async def _grants(capacity: Capacity, order: list[str], name: str, *, urgent: bool) -> None:
    """A poller that takes room forever (each grant held until the test releases it)."""
    while True:
        got = await capacity.reserve(10, urgent=urgent)
        order += [name] * got


async def test_urgent_room_goes_first_but_the_normal_lane_keeps_its_share() -> None:
    capacity = Capacity(limit=40, pollers=4, fair_every=4)  # a normal share is 10
    order: list[str] = []
    capacity.in_flight = 40  # full: everyone waits
    pollers = [
        asyncio.create_task(_grants(capacity, order, "normal", urgent=False)),
        asyncio.create_task(_grants(capacity, order, "fast", urgent=True)),
    ]
    await asyncio.sleep(0)
    for _ in range(500):  # room frees one message at a time
        await capacity.release(1)
        await asyncio.sleep(0)
    for task in pollers:
        task.cancel()
    await asyncio.gather(*pollers, return_exceptions=True)
    # Fast first: the first room goes to the fast lane...
    assert order[:10] == ["fast"] * 10
    # ...and the normal lane is never starved: a share of 10 after every 40 fast messages.
    assert order.count("normal") >= len(order) // 5 - 10
    assert order.count("fast") > order.count("normal")


async def test_without_fast_work_the_normal_lane_has_all_the_room() -> None:
    capacity = Capacity(limit=8, pollers=2)
    assert await capacity.reserve(10) == 4
    assert await capacity.reserve(10) == 4
    waiting = asyncio.create_task(capacity.reserve(10))
    await asyncio.sleep(0)
    assert not waiting.done()
    await capacity.release(4)
    assert await waiting == 4
    # a cancelled waiter gives back what it was granted meanwhile
    late = asyncio.create_task(capacity.reserve(10))
    await asyncio.sleep(0)
    await capacity.release(4)
    late.cancel()
    await asyncio.gather(late, return_exceptions=True)
    assert capacity.in_flight == 4


async def test_fast_messages_overtake_a_normal_backlog(
    database_url: str,
    sqs: Any,
    consumer_settings: Any,
    queues: tuple[str, str],
    run_consumer: Any,
    stub: Any,
) -> None:
    fast_url, _ = await queue_mod.create_lane(
        sqs, InfraSettings(**consumer_settings.model_dump()), "fast"
    )
    stub.faults(latency={"dist": "fixed", "ms": 100}, scope="submit")
    backlog = seed_rows(database_url, 300)
    await send_messages(sqs, queues[0], backlog)
    consumer: Consumer = await run_consumer(consumer_concurrency=8, consumer_pollers=2)
    assert [lane.name for lane in consumer.lanes] == ["normal", "fast"]

    def done(ids: list[str]) -> int:
        wanted = set(ids)
        return sum(1 for r in rows(database_url) if r["id"] in wanted and r["status"] != "pending")

    await wait_until(lambda: done(backlog) >= 16, 30, "the normal lane under way")
    urgent = seed_rows(database_url, 10)
    await send_messages(sqs, fast_url, urgent)
    await wait_until(lambda: done(urgent) == 10, 30, "the fast messages handled")
    # 300 normal messages at 8 at a time and 100 ms each take ~4 s; the fast ones were taken
    # long before the backlog cleared.
    assert done(backlog) < 200
    assert consumer.lane("fast").received == 10
