from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from relay_core.cache import CacheWrite, StatusCache, connect
from relay_wire.resp import RespClient

URL = "redis://127.0.0.1:6379/0"


@pytest.fixture
async def admin() -> AsyncIterator[Redis]:
    """redis-py, for what the tests look at beside the cache (TTLs, deletes, flushes)."""
    redis = connect(URL, 1.0)
    yield redis
    await redis.aclose()


@pytest.fixture(params=["resp", "redis-py"])
async def cache(request: pytest.FixtureRequest) -> AsyncIterator[StatusCache]:
    """The cache on the services' own client (relay_wire.resp), and on redis-py."""
    commands = RespClient(URL, 1.0) if request.param == "resp" else connect(URL, 1.0)
    yield StatusCache(commands, f"relaytest:{uuid.uuid4().hex[:8]}:", active_ttl_s=30)
    await commands.aclose()


async def test_an_older_version_never_replaces_a_newer_entry(cache: StatusCache) -> None:
    tx = str(uuid.uuid4())
    assert await cache.put(tx, 2, {"status": "submitted"}, terminal=False)
    assert not await cache.put(tx, 1, {"status": "pending"}, terminal=False)
    assert not await cache.put(tx, 2, {"status": "pending"}, terminal=False)
    assert await cache.get(tx) == (2, {"status": "submitted"})
    assert await cache.put(tx, 3, {"status": "mined"}, terminal=True)
    assert await cache.get(tx) == (3, {"status": "mined"})


async def test_terminal_entries_live_longer_than_active_ones(
    cache: StatusCache, admin: Redis
) -> None:
    tx_active, tx_done = str(uuid.uuid4()), str(uuid.uuid4())
    await cache.put(tx_active, 1, {}, terminal=False)
    await cache.put(tx_done, 1, {}, terminal=True)
    redis = admin
    assert 0 < await redis.ttl(cache.key(tx_active)) <= 30
    assert 30 < await redis.ttl(cache.key(tx_done)) <= 600


async def test_a_batch_follows_the_same_version_and_lifetime_rules(
    cache: StatusCache, admin: Redis
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
    assert 30 < await admin.ttl(cache.key(fresh)) <= 600


@pytest.mark.parametrize("client", [RespClient, connect])
async def test_unreachable_redis_is_a_quiet_miss_and_is_skipped_for_a_moment(
    client: object,
) -> None:
    redis = client("redis://127.0.0.1:1/0", 0.2)  # type: ignore[operator]
    cache = StatusCache(redis, "x:")
    assert await cache.get_quietly("a") is None
    assert not await cache.put_quietly("a", 1, {}, terminal=False)
    assert cache.errors == 1  # the second call was skipped, not retried
    await redis.aclose()


async def test_an_entry_gone_before_its_time_does_not_let_an_older_read_back_in(
    cache: StatusCache, admin: Redis
) -> None:
    tx = str(uuid.uuid4())
    assert await cache.put(tx, 3, {"status": "submitted"}, terminal=False)
    await admin.delete(cache.key(tx))  # expired, or evicted, while a reader held v1
    assert not await cache.put(tx, 1, {"status": "pending"}, terminal=False)
    assert await cache.get(tx) is None  # a miss: the reader goes to MySQL, never to v1
    assert await cache.put(tx, 3, {"status": "submitted"}, terminal=False)  # the same read
    assert 30 < await admin.ttl(cache.key(tx) + ":v") <= 60


async def test_a_batch_is_one_command_and_a_redis_that_forgot_the_script_gets_it_back(
    cache: StatusCache, admin: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    redis = cache._redis
    sent: list[str] = []
    method = "execute" if isinstance(redis, RespClient) else "execute_command"
    execute = getattr(redis, method)

    async def recorded(*args: object, **options: object) -> object:
        sent.append(" ".join(str(a) for a in args[:2]) if args[0] == "SCRIPT" else str(args[0]))
        return await execute(*args, **options)

    monkeypatch.setattr(redis, method, recorded)
    ids = [str(uuid.uuid4()) for _ in range(3)]
    writes = [CacheWrite(tx, 1, {"status": "submitted"}, terminal=False) for tx in ids]
    assert await cache.put_many(writes) == [True] * 3
    sent_for_first = list(sent)
    await admin.script_flush()  # a restarted Redis knows no scripts
    sent.clear()
    newer = [CacheWrite(tx, 2, {"status": "mined"}, terminal=False) for tx in ids]
    assert await cache.put_many(newer) == [True] * 3
    assert sent == ["EVALSHA", "SCRIPT LOAD", "EVALSHA"]
    assert sent_for_first in (["EVALSHA"], ["EVALSHA", "SCRIPT LOAD", "EVALSHA"])
    assert [await cache.get(tx) for tx in ids] == [(2, {"status": "mined"})] * 3
