"""Group commit: concurrent status writes share a transaction and keep the guarantees of
one transaction each (compare-and-set, event row, Redis after commit)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from consumer_testkit import seed_rows
from sqlalchemy import event, func, inspect, select, update

from queue_consumer.lanes import Capacity
from queue_consumer.transactions import repository
from queue_consumer.transactions.group_commit import GroupCommit
from relay_core.cache import StatusCache, connect
from relay_core.db.engine import create_engine, create_sessionmaker
from relay_core.db.models import Transaction, TransactionEvent, utcnow
from relay_core.db.transitions import Change
from relay_core.settings import InfraSettings
from relay_wire import direct as direct_db
from relay_wire.direct import DirectPool

REDIS_URL = "redis://127.0.0.1:6379/0"


@pytest.fixture(params=["sqlalchemy", "direct"])
async def setup(
    request: pytest.FixtureRequest, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[dict[str, Any]]:
    """Each test twice: batches written through SQLAlchemy (SQLite, or the direct pool off)
    and on driver connections (relay_wire.direct, MySQL's default)."""
    engine = create_engine(InfraSettings(database_url=database_url, database_pool_size=4))
    redis = connect(REDIS_URL, 1.0)
    cache = StatusCache(redis, f"relaytest:{uuid.uuid4().hex[:8]}:")
    commits: list[int] = []
    event.listen(engine.sync_engine, "commit", lambda _conn: commits.append(1))
    pool = None
    if request.param == "direct":
        pool = DirectPool.create(engine, size=2, timeout_s=5.0)
        assert pool is not None, "the direct path needs MySQL"
        execute = direct_db.execute

        async def counted(conn: Any, sql: str, args: Any = ()) -> list[int]:
            if sql.endswith("COMMIT"):
                commits.append(1)
            return await execute(conn, sql, args)

        monkeypatch.setattr(direct_db, "execute", counted)
    yield {
        "engine": engine,
        "sessions": create_sessionmaker(engine),
        "cache": cache,
        "commits": commits,
        "database_url": database_url,
        "direct": pool,
    }
    if pool is not None:
        await pool.close()
    await redis.aclose()
    await engine.dispose()


def _group(setup: dict[str, Any], cache: StatusCache | None = None, **kwargs: Any) -> GroupCommit:
    return GroupCommit(setup["engine"], cache, direct=setup["direct"], **kwargs)


async def _load(setup: dict[str, Any], ids: list[str]) -> dict[str, Transaction]:
    """The rows as the consumer reads its batches: on the direct pool when there is one."""
    if setup["direct"] is not None:
        return await repository.load_many_direct(setup["direct"], ids)
    async with setup["sessions"]() as session:
        return await repository.load_many(session, ids)


@pytest.mark.parametrize("setup", ["direct"], indirect=True)  # the direct pool's read
async def test_rows_read_on_the_driver_connection_are_those_the_orm_reads(
    setup: dict[str, Any],
) -> None:
    ids = seed_rows(setup["database_url"], 3)
    async with setup["sessions"]() as session, session.begin():  # JSON null, dates, text
        await session.execute(
            update(Transaction)
            .where(Transaction.id == ids[0])
            .values(result={"k": [1, "é"]}, error="boom", claimed_at=utcnow())
        )
    async with setup["sessions"]() as session:
        orm = await repository.load_many(session, ids)
    direct = await repository.load_many_direct(setup["direct"], [*ids, str(uuid.uuid4())])
    assert sorted(direct) == sorted(ids)
    for tx_id in ids:
        for column in Transaction.__table__.columns:
            assert getattr(direct[tx_id], column.key) == getattr(orm[tx_id], column.key), column
        state = inspect(direct[tx_id])
        assert state.detached
        assert not state.modified
        assert state.key == inspect(orm[tx_id]).key  # the identity a Session gives it
        assert not state.expired_attributes


async def _events(setup: dict[str, Any], tx_id: str) -> int:
    async with setup["sessions"]() as session:
        count = await session.scalar(
            select(func.count()).where(TransactionEvent.transaction_id == tx_id)
        )
    return int(count or 0)


async def test_concurrent_writes_commit_together_and_each_lands_with_its_event(
    setup: dict[str, Any],
) -> None:
    ids = seed_rows(setup["database_url"], 20)
    rows = await _load(setup, ids)
    writes = _group(setup, setup["cache"], writers=1, max_batch=64)
    writes.start()
    try:
        results = await asyncio.gather(
            *(
                writes.write(
                    Change(rows[i], "processing", source="consumer", values={"attempts": 1})
                )
                for i in ids
            )
        )
    finally:
        await writes.stop()

    assert results == [True] * 20
    # One writer, all queued at once: far fewer transactions than writes.
    assert writes.writes == 20
    assert writes.batches <= 3
    assert len(setup["commits"]) == writes.batches
    after = await _load(setup, ids)
    for tx_id in ids:
        assert (after[tx_id].status, after[tx_id].version, after[tx_id].attempts) == (
            "processing",
            2,
            1,
        )
        assert rows[tx_id].version == 2  # the caller's object holds the committed state
        assert await _events(setup, tx_id) == 1
        cached = await setup["cache"].get(tx_id)
        assert cached is not None
        assert cached[0] == 2
        assert cached[1]["status"] == "processing"


async def test_two_writes_from_the_same_read_in_one_batch_only_one_wins(
    setup: dict[str, Any],
) -> None:
    (tx_id,) = seed_rows(setup["database_url"], 1)
    first = (await _load(setup, [tx_id]))[tx_id]
    second = (await _load(setup, [tx_id]))[tx_id]
    writes = _group(setup, writers=1)
    writes.start()
    try:
        results = await asyncio.gather(
            writes.write(Change(first, "processing", source="a", values={"claimed_by": "a"})),
            writes.write(Change(second, "processing", source="b", values={"claimed_by": "b"})),
        )
    finally:
        await writes.stop()

    assert sorted(results) == [False, True]
    row = (await _load(setup, [tx_id]))[tx_id]
    assert row.claimed_by == ("a" if results[0] else "b")
    assert row.version == 2
    assert await _events(setup, tx_id) == 1


async def test_in_a_batch_where_one_row_moved_on_exactly_the_others_land(
    setup: dict[str, Any],
) -> None:
    """On the direct pool the changes that write the same columns share one UPDATE, whose
    count cannot say which row it missed: the others must still land, each with its event."""
    ids = seed_rows(setup["database_url"], 6)
    rows = await _load(setup, ids)
    moved = (await _load(setup, [ids[2]]))[ids[2]]
    solo = _group(setup)  # not started: commits at once
    assert await solo.write(Change(moved, "processing", source="other", values={"attempts": 7}))
    writes = _group(setup, writers=1)
    writes.start()
    try:
        claims = [
            writes.write(Change(rows[i], "processing", values={"claimed_by": i[:8]}))
            for i in ids[:4]
        ]
        records = [
            writes.write(Change(rows[i], "submitted", values={"executor_tx_id": f"x-{i}"}))
            for i in ids[4:]
        ]
        results = await asyncio.gather(*claims, *records)
    finally:
        await writes.stop()

    assert results == [True, True, False, True, True, True]
    after = await _load(setup, ids)
    assert [after[i].version for i in ids] == [2] * 6
    assert after[ids[2]].attempts == 7  # the other writer's change stands
    assert after[ids[2]].claimed_by is None
    assert [after[i].claimed_by for i in ids[:4] if i != ids[2]] == [
        i[:8] for i in ids[:4] if i != ids[2]
    ]
    assert [after[i].executor_tx_id for i in ids[4:]] == [f"x-{i}" for i in ids[4:]]
    assert [await _events(setup, i) for i in ids] == [1, 1, 1, 1, 1, 1]


async def test_a_change_the_database_refuses_fails_alone_not_its_batch(
    setup: dict[str, Any],
) -> None:
    ids = seed_rows(setup["database_url"], 3)
    rows = await _load(setup, ids)
    writes = _group(setup, writers=1)
    writes.start()
    try:
        bad = Change(rows[ids[0]], "processing", values={"claimed_by": "x" * 500})  # > 64
        results = await asyncio.gather(
            writes.write(bad),
            writes.write(Change(rows[ids[1]], "processing")),
            writes.write(Change(rows[ids[2]], "processing")),
            return_exceptions=True,
        )
    finally:
        await writes.stop()

    assert isinstance(results[0], Exception)
    assert results[1:] == [True, True]
    after = await _load(setup, ids)
    assert [after[i].status for i in ids] == ["pending", "processing", "processing"]
    assert await _events(setup, ids[0]) == 0


async def test_a_write_whose_caller_gave_up_before_its_batch_is_not_made(
    setup: dict[str, Any],
) -> None:
    ids = seed_rows(setup["database_url"], 2)
    rows = await _load(setup, ids)
    writes = _group(setup, writers=1)
    writes.start()
    try:
        # The writer is busy with the first write while the second waits in the queue.
        first = asyncio.create_task(writes.write(Change(rows[ids[0]], "processing")))
        second = asyncio.create_task(writes.write(Change(rows[ids[1]], "processing")))
        await asyncio.sleep(0)
        second.cancel()
        assert await first
        with pytest.raises(asyncio.CancelledError):
            await second
    finally:
        await writes.stop()

    after = await _load(setup, ids)
    assert [after[i].status for i in ids] == ["processing", "pending"]


async def test_a_change_decided_from_an_older_read_fails_though_its_row_object_moved_on(
    setup: dict[str, Any],
) -> None:
    (tx_id,) = seed_rows(setup["database_url"], 1)
    shared = (await _load(setup, [tx_id]))[tx_id]
    writes = _group(setup)  # not started: each write commits alone
    first = Change(shared, "processing", source="a", values={"claimed_by": "a"})
    second = Change(shared, "processing", source="b", values={"claimed_by": "b"})
    assert await writes.write(first)
    assert shared.version == 2  # the object now shows the first change ...
    # ... but the second was decided from version 1: it must not land on version 2.
    assert not await writes.write(second)
    row = (await _load(setup, [tx_id]))[tx_id]
    assert (row.claimed_by, row.version) == ("a", 2)
    assert await _events(setup, tx_id) == 1


async def test_a_batch_that_cannot_commit_in_time_fails_its_writes_instead_of_hanging(
    setup: dict[str, Any],
) -> None:
    ids = seed_rows(setup["database_url"], 2)
    rows = await _load(setup, ids)
    writes = _group(setup, writers=1, timeout_s=0.5)
    writes.start()
    try:
        # Another transaction holds the row lock: the batch's UPDATE waits for it.
        async with setup["engine"].connect() as blocker:
            await blocker.execute(
                select(Transaction).where(Transaction.id == ids[0]).with_for_update()
            )
            blocked = asyncio.gather(
                writes.write(Change(rows[ids[0]], "processing")), return_exceptions=True
            )
            (outcome,) = await asyncio.wait_for(blocked, 10)
            await blocker.rollback()
        assert isinstance(outcome, TimeoutError)
        # The writer is still there for the next batch.
        assert await writes.write(Change(rows[ids[1]], "processing"))
    finally:
        await writes.stop()


async def test_under_a_small_in_flight_limit_a_poller_gets_room_while_others_work() -> None:
    capacity = Capacity(5, pollers=4)
    for _ in range(4):
        assert await asyncio.wait_for(capacity.reserve(10), 1) == 1
    # One slot is left: taken at once, not only when everything in flight has finished.
    assert await asyncio.wait_for(capacity.reserve(10), 1) == 1
    assert capacity.in_flight == 5
    # A large limit still hands out whole batches of ten.
    assert await Capacity(256, pollers=4).reserve(10) == 10
