"""Rate limits: a client past its bucket gets 429 with the RateLimit headers and nothing is
written; requests without a valid key are limited per address and unknown keys are answered
from memory; the bucket lives in Redis when there is one, in the process when there is not."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from api_testkit import DEAD, count_rows
from sqlalchemy import update

from relay_api.limits.service import Limit, LocalBuckets, RateLimiter
from relay_api.runtime import Runtime
from relay_core import apikeys
from relay_core.db.models import ApiClient
from relay_core.errors import Unauthorized


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_bucket_allows_its_burst_then_refills_at_its_rate() -> None:
    clock = Clock()
    buckets = LocalBuckets(clock=clock)
    limit = Limit(rate=2, burst=3)
    assert [buckets.take("a", limit).allowed for _ in range(4)] == [True, True, True, False]
    refused = buckets.take("a", limit)
    assert refused.headers() == {
        "RateLimit-Limit": "3",
        "RateLimit-Remaining": "0",
        "RateLimit-Reset": "2",
        "Retry-After": "1",
    }
    clock.now += 0.5  # one token back
    assert buckets.take("a", limit).allowed
    assert not buckets.take("a", limit).allowed
    assert buckets.take("b", limit).allowed  # another subject, another bucket


async def _limit_client(runtime: Runtime, key: str, rate: float, burst: int) -> None:
    async with runtime.sessions() as session, session.begin():
        await session.execute(
            update(ApiClient)
            .where(ApiClient.key_hash == apikeys.hash_key(key))
            .values(rate_limit_per_s=rate, rate_limit_burst=burst)
        )


async def _over_the_limit(client: httpx.AsyncClient, runtime: Runtime, key: str) -> None:
    await _limit_client(runtime, key, rate=0.5, burst=3)
    headers = {"X-API-Key": key}
    answers = [
        await client.post("/api/v1/relay/direct", json={"to": DEAD}, headers=headers)
        for _ in range(5)
    ]
    assert [a.status_code for a in answers] == [202, 202, 202, 429, 429]
    refused = answers[3]
    assert refused.json()["error"] == "rate_limited"
    assert refused.headers["RateLimit-Limit"] == "3"
    assert refused.headers["RateLimit-Remaining"] == "0"
    assert int(refused.headers["Retry-After"]) == 2  # a token comes back every 2 s
    assert int(refused.headers["RateLimit-Reset"]) >= 2
    assert await count_rows(runtime) == 3  # the refused ones wrote nothing


async def test_a_client_over_its_rate_gets_429_and_nothing_is_written(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str
) -> None:
    assert runtime.redis is not None  # the bucket is in Redis, shared by every replica
    await _over_the_limit(client, runtime, api_key)


class TestWithoutRedis:
    @pytest.fixture
    def settings_overrides(self) -> dict[str, Any]:
        return {"redis_url": None}

    async def test_the_embedded_mode_limits_in_the_process(
        self, client: httpx.AsyncClient, runtime: Runtime, api_key: str
    ) -> None:
        assert runtime.redis is None
        await _over_the_limit(client, runtime, api_key)


class TestUnknownKeys:
    @pytest.fixture
    def settings_overrides(self) -> dict[str, Any]:
        return {
            "unauthenticated_rate_per_s": 0.1,
            "unauthenticated_burst": 3,
            "unknown_key_cache_s": 1.0,
            "auth_cache_ttl_s": 60.0,  # as deployed (5 s): a verified key is kept
        }

    async def test_bad_keys_are_limited_per_address_before_the_database_is_asked(
        self, client: httpx.AsyncClient, runtime: Runtime, api_key: str
    ) -> None:
        # A key this process has verified is not held back by guesses from its address.
        path, known = "/api/v1/relay/transactions", {"X-API-Key": api_key}
        assert (await client.get(path, headers=known)).status_code == 200
        lookups = runtime.authenticator.lookups
        guesses = [await client.get(path, headers={"X-API-Key": f"rk_{n}"}) for n in range(20)]
        assert [g.status_code for g in guesses[:4]] == [401, 401, 401, 429]
        assert {g.status_code for g in guesses[3:]} == {429}
        assert "Retry-After" in guesses[3].headers
        # Once the address is past its limit, a guess costs a hash, not a database read: the
        # three within the burst and the one that found it spent were read, no more.
        assert runtime.authenticator.lookups - lookups == 4
        again = await client.get(path, headers=known)
        assert again.status_code == 200, again.text
        # A request with no key guesses nothing: 401 however spent the address is.
        missing = await client.get(path)
        assert missing.status_code == 401, missing.text

    async def test_requests_without_a_key_are_not_charged_to_their_address(
        self, client: httpx.AsyncClient
    ) -> None:
        path = "/api/v1/relay/transactions"
        assert {(await client.get(path)).status_code for _ in range(10)} == {401}
        guesses = [await client.get(path, headers={"X-API-Key": f"rk_{n}"}) for n in range(4)]
        assert [g.status_code for g in guesses] == [401, 401, 401, 429]

    async def test_valid_keys_are_never_charged_to_their_address(
        self, client: httpx.AsyncClient, runtime: Runtime, api_key: str
    ) -> None:
        """Thirty requests at once with a valid key this process has not read yet (a client's
        burst after a restart) take nothing from the address's burst of 3."""
        path, known = "/api/v1/relay/transactions", {"X-API-Key": api_key}
        answers = await asyncio.gather(*(client.get(path, headers=known) for _ in range(30)))
        assert [a.status_code for a in answers] == [200] * 30
        guesses = [await client.get(path, headers={"X-API-Key": f"rk_{n}"}) for n in range(4)]
        assert [g.status_code for g in guesses] == [401, 401, 401, 429]

    async def test_an_unknown_key_is_answered_from_memory_for_a_while(
        self, runtime: Runtime
    ) -> None:
        key = "rk_guessed_then_created"
        with pytest.raises(Unauthorized):
            await runtime.authenticator.authenticate(key)
        async with runtime.sessions() as session, session.begin():
            session.add(ApiClient(name="late", key_hash=apikeys.hash_key(key), key_prefix=key[:8]))
        with pytest.raises(Unauthorized):  # remembered: no database read
            await runtime.authenticator.authenticate(key)
        await asyncio.sleep(1.1)
        assert (await runtime.authenticator.authenticate(key)).name == "late"


async def test_a_busy_client_leases_tokens_instead_of_asking_redis_every_time(
    runtime: Runtime,
) -> None:
    limiter = RateLimiter(runtime.redis, runtime.settings.redis_prefix)
    fast = Limit(rate=1000, burst=2000)  # 50 ms' worth: leases of 50
    decisions = [await limiter.take("busy", fast) for _ in range(500)]
    assert all(d.allowed for d in decisions)
    assert limiter.redis_calls == 10
    # The shared bucket in Redis gave out exactly what was leased.
    slow = Limit(rate=0.001, burst=4)  # leases of one: every request asks
    assert [(await limiter.take("slow", slow)).allowed for _ in range(5)] == [True] * 4 + [False]
    assert limiter.redis_calls == 15


async def test_requests_arriving_together_share_one_lease_at_a_time(runtime: Runtime) -> None:
    """A thousand requests at once (clients retrying after a restart) take a thousand tokens
    from the bucket, not a lease of fifty each: all are allowed, in 20 calls to Redis."""
    limiter = RateLimiter(runtime.redis, runtime.settings.redis_prefix)
    limit = Limit(rate=1000, burst=2000)
    decisions = await asyncio.gather(*(limiter.take("together", limit) for _ in range(1000)))
    assert all(d.allowed for d in decisions)
    assert limiter.redis_calls == 20
    # And past the bucket, everyone waiting on the refused call is refused with it.
    empty = Limit(rate=0.001, burst=4)
    decisions = await asyncio.gather(*(limiter.take("empty", empty) for _ in range(10)))
    assert [d.allowed for d in decisions].count(True) == 4


@pytest.mark.parametrize("shared", [True, False], ids=["redis", "local"])
async def test_many_tokens_are_taken_all_together_or_not_at_all(
    runtime: Runtime, shared: bool
) -> None:
    """A batch's transactions: all its tokens, from the lease or the bucket, or none (a
    refused batch leaves what there was for the requests after it)."""
    limiter = RateLimiter(runtime.redis if shared else None, runtime.settings.redis_prefix)
    limit = Limit(rate=0.01, burst=10)
    assert (await limiter.take_many("batch", limit, 7)).allowed
    refused = await limiter.take_many("batch", limit, 4)  # 3 left
    assert not refused.allowed
    assert refused.wait_s > 50  # a token per 100 s, one missing
    assert [(await limiter.take("batch", limit)).allowed for _ in range(4)] == [True] * 3 + [False]
    with pytest.raises(ValueError, match="more than the bucket holds"):
        await limiter.take_many("batch", limit, 11)


async def test_a_batch_spends_the_lease_it_finds_before_asking_redis(runtime: Runtime) -> None:
    limiter = RateLimiter(runtime.redis, runtime.settings.redis_prefix)
    limit = Limit(rate=1000, burst=2000)  # leases of 50
    assert (await limiter.take("lease", limit)).allowed  # leased 50, 49 left here
    assert (await limiter.take_many("lease", limit, 40)).allowed
    assert limiter.redis_calls == 1
    # 9 kept + 91 spent from the bucket, and a lease's worth for what comes next (49 more)
    assert (await limiter.take_many("lease", limit, 100)).allowed
    assert limiter.redis_calls == 2
    # The next batch's own token and its 99 others: one call (the lease's 48 and 51 more),
    # as each batch of a client sending batches costs from then on.
    for _ in range(3):
        assert (await limiter.take("lease", limit)).allowed
        assert (await limiter.take_many("lease", limit, 99)).allowed
    assert limiter.redis_calls == 5
    assert [(await limiter.take("lease", limit)).allowed for _ in range(49)] == [True] * 49
    assert limiter.redis_calls == 5  # the lease left behind served them
    assert (await limiter.take("lease", limit)).allowed
    assert limiter.redis_calls == 6  # ... to its last token
