"""The operator's switch as one consumer obeys it (relay_core.controls): paused, it receives
nothing and says so; resumed, it goes on; draining, it finishes the queue and then pauses the
lane itself. At scale, on real processes, in tests/test_pause.py."""

from __future__ import annotations

import asyncio
from typing import Any

from consumer_testkit import (
    queue_depth,
    seed_rows,
    send_messages,
    status_counts,
    sync_engine,
    wait_until,
)
from sqlalchemy import insert
from sqlalchemy.ext.asyncio import async_sessionmaker

from queue_consumer.worker import Consumer
from relay_core import controls
from relay_core.db.models import QueueControl, utcnow


async def _set(consumer: Consumer, state: controls.LaneState) -> None:
    sessions: async_sessionmaker[Any] = consumer.claims.sessions
    async with sessions() as session, session.begin():
        await controls.set_lane_state(session, "normal", state, "test")


async def _reported(consumer: Consumer) -> dict[str, Any]:
    async with consumer.claims.sessions() as session:
        view = await controls.overview(session)
    normal = [c for c in view["consumers"] if c["lane"] == "normal"]
    return dict(normal[0]) if normal else {}


async def _state_is(consumer: Consumer, state: str) -> bool:
    return (await _reported(consumer)).get("state") == state


async def _must_not_run() -> Any:
    raise AssertionError("the reconciler ran while the lane was paused")


async def test_paused_a_consumer_receives_nothing_then_resumed_it_goes_on(
    database_url: str, sqs: Any, queues: tuple[str, str], run_consumer: Any
) -> None:
    consumer: Consumer = await run_consumer(consumer_control_interval_s=0.2)
    await _set(consumer, controls.LaneState.paused)
    # Paused once its pollers are parked (a receive already waiting ends first).
    await wait_until(
        lambda: _state_is(consumer, "paused"), 10, "the consumer reports itself paused"
    )

    ids = seed_rows(database_url, 5)
    await send_messages(sqs, queues[0], ids)
    await asyncio.sleep(2)
    assert await queue_depth(sqs, queues[0]) == 5
    assert status_counts(database_url) == {"pending": 5}
    assert consumer.stats.counts["received"] == 0
    # The reconciler leaves the waiting rows alone while the lane is paused.
    assert consumer.reconciler is not None
    consumer.reconciler.run_once = _must_not_run  # type: ignore[method-assign]
    await consumer._reconcile()

    await _set(consumer, controls.LaneState.running)
    await wait_until(lambda: status_counts(database_url).get("pending", 0) == 0, 30, "resumed")
    assert consumer.stats.counts["received"] == 5
    await wait_until(lambda: _state_is(consumer, "running"), 10, "running again")


async def test_draining_finishes_the_queue_then_pauses_the_lane(
    database_url: str, sqs: Any, queues: tuple[str, str], run_consumer: Any
) -> None:
    consumer: Consumer = await run_consumer(consumer_control_interval_s=0.2, consumer_wait_time_s=1)
    await _set(consumer, controls.LaneState.paused)
    await wait_until(lambda: not consumer.lane("normal").receiving.is_set(), 10, "paused")
    ids = seed_rows(database_url, 8)
    await send_messages(sqs, queues[0], ids)
    await _set(consumer, controls.LaneState.draining)

    async def lane() -> controls.LaneState:
        async with consumer.claims.sessions() as session:
            return await controls.lane_state(session, "normal")

    deadline = asyncio.get_running_loop().time() + 30
    while await lane() is not controls.LaneState.paused:
        assert asyncio.get_running_loop().time() < deadline, "the lane did not pause"
        await asyncio.sleep(0.2)
    assert consumer.stats.counts["received"] == 8
    assert status_counts(database_url).get("pending", 0) == 0
    await wait_until(
        lambda: not consumer.lane("normal").receiving.is_set(), 10, "paused after draining"
    )


async def test_a_consumer_started_while_its_lane_is_paused_receives_nothing(
    database_url: str, sqs: Any, queues: tuple[str, str], run_consumer: Any
) -> None:
    engine = sync_engine(database_url)
    with engine.begin() as conn:
        conn.execute(
            insert(QueueControl).values(
                lane="normal", state="paused", changed_by="test", changed_at=utcnow()
            )
        )
    engine.dispose()
    ids = seed_rows(database_url, 3)
    await send_messages(sqs, queues[0], ids)
    consumer: Consumer = await run_consumer(consumer_control_interval_s=0.2)
    await asyncio.sleep(2)
    assert consumer.stats.counts["received"] == 0
    assert await queue_depth(sqs, queues[0]) == 3
