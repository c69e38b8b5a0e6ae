from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from relay_core.cache import CacheWrite, StatusCache, connect


@pytest.fixture
async def cache() -> AsyncIterator[StatusCache]:
    redis = connect("redis://127.0.0.1:6379/0", 1.0)
    yield StatusCache(redis, f"relaytest:{uuid.uuid4().hex[:8]}:", active_ttl_s=30)
    await redis.aclose()


async def test_an_older_version_never_replaces_a_newer_entry(cache: StatusCache) -> None:
    tx = str(uuid.uuid4())
    assert await cache.put(tx, 2, {"status": "submitted"}, terminal=False)
    assert not await cache.put(tx, 1, {"status": "pending"}, terminal=False)
    assert not await cache.put(tx, 2, {"status": "pending"}, terminal=False)
    assert await cache.get(tx) == (2, {"status": "submitted"})
    assert await cache.put(tx, 3, {"status": "mined"}, terminal=True)
    assert await cache.get(tx) == (3, {"status": "mined"})


async def test_terminal_entries_live_longer_than_active_ones(cache: StatusCache) -> None:
    tx_active, tx_done = str(uuid.uuid4()), str(uuid.uuid4())
    await cache.put(tx_active, 1, {}, terminal=False)
    await cache.put(tx_done, 1, {}, terminal=True)
    redis = cache._redis
    assert 0 < await redis.ttl(cache.key(tx_active)) <= 30
    assert 30 < await redis.ttl(cache.key(tx_done)) <= 600


async def test_a_pipelined_batch_follows_the_same_version_and_lifetime_rules(
    cache: StatusCache,
) -> None:
    moved, fresh = str(uuid.uuid4()), str(uuid.uuid4())
    await cache.put(moved, 5, {"status": "mined"}, terminal=False)
    stored = await cache.put_many(
        [
            CacheWrite(moved, 4, {"status": "submitted"}, terminal=False),
            CacheWrite(fresh, 1, {"status": "confirmed"}, terminal=True),
        ]
    )
    assert stored == [False, True]
    assert await cache.get(moved) == (5, {"status": "mined"})
    assert await cache.get(fresh) == (1, {"status": "confirmed"})
    assert 30 < await cache._redis.ttl(cache.key(fresh)) <= 600


async def test_unreachable_redis_is_a_quiet_miss_and_is_skipped_for_a_moment() -> None:
    redis = connect("redis://127.0.0.1:1/0", 0.2)
    cache = StatusCache(redis, "x:")
    assert await cache.get_quietly("a") is None
    assert not await cache.put_quietly("a", 1, {}, terminal=False)
    assert cache.errors == 1  # the second call was skipped, not retried
    await redis.aclose()


async def test_an_entry_gone_before_its_time_does_not_let_an_older_read_back_in(
    cache: StatusCache,
) -> None:
    tx = str(uuid.uuid4())
    assert await cache.put(tx, 3, {"status": "submitted"}, terminal=False)
    await cache._redis.delete(cache.key(tx))  # expired, or evicted, while a reader held v1
    assert not await cache.put(tx, 1, {"status": "pending"}, terminal=False)
    assert await cache.get(tx) is None  # a miss: the reader goes to MySQL, never to v1
    assert await cache.put(tx, 3, {"status": "submitted"}, terminal=False)  # the same read
    assert 30 < await cache._redis.ttl(cache.key(tx) + ":v") <= 60


async def test_a_batch_is_one_command_and_a_redis_that_forgot_the_script_gets_it_back(
    cache: StatusCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    redis = cache._redis
    sent: list[str] = []
    execute = redis.execute_command

    async def recorded(*args: object, **options: object) -> object:
        sent.append(" ".join(str(a) for a in args[:2]) if args[0] == "SCRIPT" else str(args[0]))
        return await execute(*args, **options)

    monkeypatch.setattr(redis, "execute_command", recorded)
    ids = [str(uuid.uuid4()) for _ in range(3)]
    writes = [CacheWrite(tx, 1, {"status": "submitted"}, terminal=False) for tx in ids]
    assert await cache.put_many(writes) == [True] * 3
    sent_for_first = list(sent)
    await redis.script_flush()  # a restarted Redis knows no scripts
    sent.clear()
    newer = [CacheWrite(tx, 2, {"status": "mined"}, terminal=False) for tx in ids]
    assert await cache.put_many(newer) == [True] * 3
    assert sent == ["EVALSHA", "SCRIPT LOAD", "EVALSHA"]
    assert sent_for_first in (["EVALSHA"], ["EVALSHA", "SCRIPT LOAD", "EVALSHA"])
    assert [await cache.get(tx) for tx in ids] == [(2, {"status": "mined"})] * 3
