"""The follower: statuses within about a second without webhooks, from the executor's lists."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from consumer_testkit import (
    Stub,
    events,
    rows,
    seed_rows,
    set_rows,
    status_counts,
    twenty_good_five_failing,
    wait_until,
)

from queue_consumer.circuit import CircuitOpen
from queue_consumer.tracking.follow import Follower
from queue_consumer.transactions.group_commit import GroupCommit
from relay_core.db.engine import create_engine, create_sessionmaker
from relay_core.executor import ErrorKind, ExecutorError, ExecutorTx
from relay_core.settings import InfraSettings
from relay_wire.direct import DirectPool

HASH = "0x" + "ab" * 32


async def test_without_webhooks_statuses_arrive_within_seconds_not_the_trackers_fifteen(
    database_url: str, sqs: Any, queues: tuple[str, str], stub: Stub, run_consumer: Any
) -> None:
    """The shipped settings (the tracker asks about a row 15 s after it was last heard of):
    every transaction final within a few seconds can only be the follower's doing."""
    good, bad = await twenty_good_five_failing(database_url, stub, sqs, queues[0])
    started = time.monotonic()
    await run_consumer()
    await wait_until(
        lambda: status_counts(database_url) == {"confirmed": 20, "failed": 5}, 10, "all final"
    )
    assert time.monotonic() - started < 15
    final = [e for e in events(database_url) if e["to_status"] in ("confirmed", "failed")]
    assert len(final) == 25
    assert {e["source"] for e in final} == {"follower"}
    by_id = {r["id"]: r for r in rows(database_url)}
    assert all(by_id[i]["hash"].startswith("0x") and by_id[i]["confirmed_at"] for i in good)
    assert all(by_id[i]["error"] for i in bad)


class _Executor:
    """A relayer's list, newest first, filtered by status as OZ Relayer v1.6 filters and
    orders it (confirmed ones by their confirmation, the others by creation)."""

    def __init__(self) -> None:
        self.txs: list[dict[str, Any]] = []  # oldest first
        self.pages: list[tuple[str | None, int]] = []
        self.failing: Exception | None = None
        self.confirmations = 0
        self.now = datetime.now(UTC)  # the executor's clock, moved on by the tests

    def add(self, executor_id: str, created_at: datetime, status: str = "pending") -> None:
        self.txs.append(
            {"id": executor_id, "status": status, "hash": None, "created_at": _rfc3339(created_at)}
        )

    def move(self, executor_id: str, status: str) -> None:
        for tx in self.txs:
            if tx["id"] == executor_id:
                tx["status"], tx["hash"] = status, HASH
                if status == "confirmed":
                    self.confirmations += 1  # in the order of the calls, a microsecond apart
                    when = self.now + timedelta(microseconds=self.confirmations)
                    tx["confirmed_at"] = _rfc3339(when)

    @contextlib.asynccontextmanager
    async def slot(self, counted: bool = True) -> AsyncIterator[None]:
        if self.failing is not None and isinstance(self.failing, CircuitOpen):
            raise self.failing
        yield

    async def list_raw(
        self, page: int, per_page: int, status: str | None = None
    ) -> list[dict[str, Any]]:
        if self.failing is not None:
            raise self.failing
        self.pages.append((status, page))
        matches = [t for t in reversed(self.txs) if status is None or t["status"] == status]
        if status == "confirmed":
            matches.sort(key=lambda t: t["confirmed_at"], reverse=True)
        return [dict(t) for t in matches[(page - 1) * per_page : page * per_page]]


def _rfc3339(when: datetime) -> str:
    return when.astimezone(UTC).isoformat()


@contextlib.asynccontextmanager
async def _follower(
    database_url: str,
    executor: _Executor,
    driver: str,
    writes_with: Any = GroupCommit,
    **settings: Any,
) -> AsyncIterator[Follower]:
    """A follower of one relayer (``executor``); ``writes_with``: the group commit's class,
    or a function of (engine, cache, direct=) that makes one."""
    member = SimpleNamespace(id="relayer-1", guard=executor, client=executor)
    pool = SimpleNamespace(member=lambda _relayer: member)
    engine = create_engine(InfraSettings(database_url=database_url))
    direct = DirectPool.create(engine, size=2, timeout_s=5.0) if driver == "direct" else None
    writes = writes_with(engine, None, direct=direct)
    writes.start()
    try:
        yield Follower(
            create_sessionmaker(engine),
            pool,  # type: ignore[arg-type]
            writes,
            direct=direct,
            interval_s=1.0,
            page_size=settings.get("page_size", 10),
            max_pages=settings.get("max_pages", 5),
            capacity=settings.get("capacity", 1000),
            max_age_s=settings.get("max_age_s", 600.0),
            vouch_every_s=settings.get("vouch_every_s", 7.5),
        )
    finally:
        await writes.stop()
        if direct is not None:
            await direct.close()
        await engine.dispose()


def _submitted(database_url: str, count: int, executor: _Executor) -> list[str]:
    """Rows recorded as sent to the executor, oldest first, a second apart."""
    ids = seed_rows(database_url, count)
    start = datetime.now(UTC) - timedelta(seconds=count + 10)
    for n, tx_id in enumerate(ids):
        set_rows(
            database_url,
            [tx_id],
            status="submitted",
            executor_tx_id=f"ex-{tx_id}",
            relayer="relayer-1",
            version=2,
        )
        executor.add(f"ex-{tx_id}", start + timedelta(seconds=n))
    return ids


def _follow(follower: Follower, executor: _Executor, ids: list[str]) -> None:
    by_id = {tx["id"]: tx for tx in executor.txs}
    for tx_id in ids:
        follower.follow("relayer-1", tx_id, ExecutorTx.from_api(by_id[f"ex-{tx_id}"]))


@pytest.mark.parametrize("driver", ["sqlalchemy", "direct"])
async def test_a_backlog_deeper_than_a_page_moves_in_one_read_and_the_rest_stay_followed(
    database_url: str, driver: str
) -> None:
    executor = _Executor()
    ids = _submitted(database_url, 35, executor)
    # Older history of the relayer (final before any of these was sent): never paged into.
    for n in range(30):
        long_ago = _rfc3339(datetime.now(UTC) - timedelta(days=1, seconds=-n))
        executor.txs.insert(
            0,
            {
                "id": f"old-{n}",
                "status": "confirmed",
                "hash": HASH,
                "created_at": long_ago,
                "confirmed_at": long_ago,
            },
        )
    async with _follower(database_url, executor, driver) as follower:
        _follow(follower, executor, ids)
        for tx_id in ids[:22]:
            executor.move(f"ex-{tx_id}", "confirmed")  # a relayer mines in nonce order
        for tx_id in ids[22:25]:
            executor.move(f"ex-{tx_id}", "mined")
        assert await follower.run_once() == 25
        assert follower.following == 13  # the 3 mined and the 10 still waiting
        assert _confirmed_pages(executor) == [1, 2, 3]  # 22 of this backlog, then its end
        executor.now += timedelta(seconds=10)
        executor.move(f"ex-{ids[22]}", "confirmed")
        assert await follower.run_once() == 1
        # The confirmed list down to HEAD_MARGIN before the last read's newest: all 22 again.
        assert _confirmed_pages(executor) == [1, 2, 3]
        assert await follower.run_once() == 0  # nothing moved since: nothing written
        assert _confirmed_pages(executor) == [1]  # down to the new newest, less the margin
    by_id = {r["id"]: r for r in rows(database_url)}
    assert {by_id[i]["status"] for i in ids[:23]} == {"confirmed"}
    assert {by_id[i]["status"] for i in ids[23:25]} == {"mined"}
    assert {by_id[i]["status"] for i in ids[25:]} == {"submitted"}
    assert {by_id[i]["hash"] for i in ids[:25]} == {HASH}
    assert all(by_id[i]["confirmed_at"] is not None for i in ids[:23])


def _confirmed_pages(executor: _Executor) -> list[int]:
    """The pages of the confirmed list read since the last call."""
    pages = [page for status, page in executor.pages if status == "confirmed"]
    executor.pages.clear()
    return pages


@pytest.mark.parametrize("driver", ["sqlalchemy", "direct"])
@pytest.mark.parametrize("whole", [True, False])
async def test_rows_that_a_whole_read_found_waiting_are_marked_heard_of_for_the_tracker(
    database_url: str, whole: bool, driver: str
) -> None:
    """A whole read of every list they could have moved to did not show them: the tracker need
    not ask the executor about each. A read cut short (its pages ran out) proves nothing."""
    executor = _Executor()
    ids = _submitted(database_url, 25, executor)
    settings = {"vouch_every_s": 0.0, "max_pages": 5 if whole else 1}
    async with _follower(database_url, executor, driver, **settings) as follower:
        _follow(follower, executor, ids)
        for tx_id in ids[:15]:  # more than the one page of 10 the cut-short read may read
            executor.move(f"ex-{tx_id}", "confirmed")
        assert await follower.run_once() == (15 if whole else 10)
    by_id = {r["id"]: r for r in rows(database_url)}
    waiting = [by_id[i] for i in ids[15:]]
    assert {r["status"] for r in waiting} == {"submitted"}
    assert all(r["version"] == 2 for r in waiting)  # no version, no event: only heard of
    if whole:
        assert all(r["last_synced_at"] is not None for r in waiting)
    else:
        assert all(r["last_synced_at"] is None for r in waiting)


async def test_the_oldest_one_confirmed_last_heads_the_confirmed_list_and_is_found(
    database_url: str,
) -> None:
    """A transaction that waited (a fee bumped, a nonce gap) is confirmed after younger ones:
    the confirmed list is ordered by confirmation, so it is on the first page."""
    executor = _Executor()
    ids = _submitted(database_url, 25, executor)
    async with _follower(database_url, executor, "direct") as follower:
        _follow(follower, executor, ids)
        for tx_id in ids[1:]:
            executor.move(f"ex-{tx_id}", "confirmed")
        assert await follower.run_once() == 24
        executor.pages.clear()
        executor.now += timedelta(seconds=30)
        executor.move(f"ex-{ids[0]}", "confirmed")
        assert await follower.run_once() == 1
        # Its page, and those within HEAD_MARGIN of the last read's newest, as always.
        assert [page for status, page in executor.pages if status == "confirmed"] == [1, 2, 3]
    assert status_counts(database_url) == {"confirmed": 25}


async def test_a_row_already_moved_by_a_webhook_is_not_written_again(database_url: str) -> None:
    executor = _Executor()
    ids = _submitted(database_url, 3, executor)
    async with _follower(database_url, executor, "direct") as follower:
        _follow(follower, executor, ids)
        set_rows(database_url, ids[:1], status="mined", hash=HASH, version=7)  # the webhook's
        for tx_id in ids:
            executor.move(f"ex-{tx_id}", "mined")
        assert await follower.run_once() == 2
        assert follower.following == 3  # mined, not final: still followed
    by_id = {r["id"]: r for r in rows(database_url)}
    assert by_id[ids[0]]["version"] == 7
    assert {by_id[i]["status"] for i in ids} == {"mined"}


async def test_a_failing_executor_or_open_circuit_moves_nothing_and_keeps_following(
    database_url: str,
) -> None:
    executor = _Executor()
    ids = _submitted(database_url, 2, executor)
    async with _follower(database_url, executor, "direct") as follower:
        _follow(follower, executor, ids)
        for tx_id in ids:
            executor.move(f"ex-{tx_id}", "confirmed")
        executor.failing = ExecutorError(ErrorKind.server_error, "boom", status=502)
        assert await follower.run_once() == 0
        executor.failing = CircuitOpen(5.0)
        assert await follower.run_once() == 0
        assert follower.following == 2
        executor.failing = None
        assert await follower.run_once() == 2
        assert follower.following == 0
    assert status_counts(database_url) == {"confirmed": 2}


async def test_a_transaction_unmoved_for_its_max_age_is_left_to_the_tracker(
    database_url: str,
) -> None:
    executor = _Executor()
    ids = _submitted(database_url, 2, executor)
    async with _follower(database_url, executor, "direct", max_age_s=0.2) as follower:
        _follow(follower, executor, ids)
        executor.move(f"ex-{ids[0]}", "mined")
        assert await follower.run_once() == 1
        await asyncio.sleep(0.3)
        assert await follower.run_once() == 0
        assert follower.following == 0
        assert follower.counts["aged_out"] == 2
    assert status_counts(database_url) == {"mined": 1, "submitted": 1}


async def test_beyond_its_capacity_a_transaction_is_not_followed(database_url: str) -> None:
    executor = _Executor()
    ids = _submitted(database_url, 3, executor)
    async with _follower(database_url, executor, "direct", capacity=2) as follower:
        _follow(follower, executor, ids)
        assert follower.following == 2
        assert follower.counts["not_followed"] == 1


class _MovedOnce(GroupCommit):
    """A group commit whose first write for ``transaction_id`` finds the row moved (another
    writer took it between the follower's load and its compare-and-set)."""

    def __init__(self, *args: Any, transaction_id: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.transaction_id, self.refused = transaction_id, 0

    async def write(self, change: Any) -> bool:
        if change.tx.id == self.transaction_id and not self.refused:
            self.refused += 1
            return False
        return await super().write(change)


async def test_news_a_read_could_not_apply_is_read_again(database_url: str) -> None:
    """A read whose news did not all land does not move the confirmed list's head on (nor mark
    anything heard of): the next read goes down as far again and finds it."""
    executor = _Executor()
    ids = _submitted(database_url, 12, executor)
    made: list[_MovedOnce] = []

    def moved_once(*args: Any, **kwargs: Any) -> _MovedOnce:
        made.append(_MovedOnce(*args, transaction_id=ids[0], **kwargs))
        return made[-1]

    async with _follower(database_url, executor, "sqlalchemy", moved_once) as follower:
        _follow(follower, executor, ids)
        for tx_id in ids[:11]:
            executor.move(f"ex-{tx_id}", "confirmed")
        executor.now += timedelta(seconds=10)
        executor.move(f"ex-{ids[11]}", "confirmed")  # the newest, 10 s after the others
        assert await follower.run_once() == 11  # ids[0]'s row "moved meanwhile"
        assert made[0].refused == 1
        assert await follower.run_once() == 1  # down to ids[0]'s page again
    assert status_counts(database_url) == {"confirmed": 12}
