"""The consumer's cache of spend policies (relay_core.policycache.PolicyCache): at most one read per
client in flight, however many messages ask at once, and a waiter that gives up does not take
the read away from the others."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from relay_core.db.engine import create_engine, create_sessionmaker
from relay_core.db.models import ApiClient, ClientSpend, utcnow
from relay_core.policycache import PolicyCache
from relay_core.settings import InfraSettings
from relay_core.spending import VALUE, bucket_of


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(InfraSettings(database_url=database_url, database_pool_size=4))
    yield engine
    await engine.dispose()


async def _client(sessions: async_sessionmaker[AsyncSession], spent: int) -> str:
    client_id = str(uuid.uuid4())
    async with sessions() as session, session.begin():
        await session.execute(
            insert(ApiClient).values(
                id=client_id,
                name="c",
                role="client",
                key_hash=uuid.uuid4().hex * 2,
                key_prefix="rk_test",
                created_at=utcnow(),
                policy_daily_value_wei="100",
                policy_granted_at=utcnow(),
            )
        )
        await session.execute(
            insert(ClientSpend).values(
                client_id=client_id, bucket=bucket_of(utcnow()), value_wei=str(spent)
            )
        )
    return client_id


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_many_messages_at_once_read_a_client_once_per_ttl(engine: AsyncEngine) -> None:
    sessions = create_sessionmaker(engine)
    client_id = await _client(sessions, spent=150)  # over its budget of 100
    clock = Clock()
    cache = PolicyCache(sessions, ttl_s=5.0, clock=clock)

    policies = await asyncio.gather(*(cache.get(client_id) for _ in range(100)))
    assert cache.reads == 1
    policy = policies[0]
    assert policy is not None
    assert policy.daily_value_wei == 100
    over = await asyncio.gather(*(cache.over_budget(client_id, policy) for _ in range(100)))
    assert over == [[(VALUE, 150)]] * 100
    assert cache.reads == 2

    clock.now = 4.9  # still fresh
    await asyncio.gather(*(cache.get(client_id) for _ in range(10)))
    assert cache.reads == 2
    clock.now = 10.0  # expired: read again, once
    await asyncio.gather(*(cache.get(client_id) for _ in range(10)))
    assert cache.reads == 3


async def test_a_waiter_that_gives_up_leaves_the_read_to_the_others(engine: AsyncEngine) -> None:
    sessions = create_sessionmaker(engine)
    client_id = await _client(sessions, spent=0)
    cache = PolicyCache(sessions)
    first = asyncio.create_task(cache.get(client_id))
    others = [asyncio.create_task(cache.get(client_id)) for _ in range(5)]
    await asyncio.sleep(0)  # the read has started
    first.cancel()
    found = await asyncio.gather(*others)
    assert all(policy is not None and policy.daily_value_wei == 100 for policy in found)
    assert cache.reads == 1
    with pytest.raises(asyncio.CancelledError):
        await first
