"""Rate limits: a token bucket per client (and per source address for requests without a
valid key), in Redis when there is one, in this process when there is not.

A bucket holds up to ``burst`` tokens and refills at ``rate`` per second; a request takes one.
In Redis the whole decision is one EVALSHA (refill, take, store, expire), timed by the Redis
server's own clock, so every API replica shares the bucket and none's clock matters.

A call to Redis costs this process ~0.15 ms of CPU, about a tenth of an accepted request, so
a process does not ask for every request: it *leases* a few tokens at a time (50 ms' worth of
the client's rate, at most ``MAX_LEASE``) and spends them locally for up to ``LEASE_S``. The
bucket is still the one in Redis: a lease takes its tokens from it, and only when it grants
none is a request refused. A token leased and not spent within ``LEASE_S`` is lost, which errs
on the side of refusing a little early, never of letting more through. Requests of one
subject that find no lease while another is being asked for wait for that answer instead of
each leasing a batch of their own (a thousand clients retrying at once after a restart would
otherwise drain the bucket in leases nobody spends, and be refused).

Without Redis (the embedded mode), or when Redis does not answer, the bucket is this
process's: the limit then holds per replica, which errs towards letting traffic through rather
than refusing it because a cache is down.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.exceptions import RedisError

from relay_core.errors import RateLimited

log = logging.getLogger(__name__)

LEASE_S = 1.0
MAX_LEASE = 50

# KEYS[1] bucket; ARGV rate (tokens/s), burst, wanted, least. Takes up to `wanted` whole
# tokens, or none when fewer than `least` are there. Returns {granted, remaining, wait_ms
# (until `least` are back, when none was granted), reset_ms}.
_TAKE = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local wanted = tonumber(ARGV[3])
local least = tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1])
local at = tonumber(state[2])
if tokens == nil or at == nil then
  tokens = burst
else
  tokens = math.min(burst, tokens + math.max(0, now - at) * rate / 1000)
end
local granted = math.min(wanted, math.floor(tokens))
if granted < least then granted = 0 end
tokens = tokens - granted
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
local wait = 0
if granted == 0 then wait = math.ceil((least - tokens) / rate * 1000) end
return {granted, math.floor(tokens), wait, math.ceil((burst - tokens) / rate * 1000)}
"""


@dataclass(frozen=True, slots=True)
class Limit:
    rate: float  # tokens per second, sustained
    burst: int  # the most at once

    def __post_init__(self) -> None:
        if self.rate <= 0 or self.burst < 1:
            raise ValueError("a rate limit needs rate > 0 and burst >= 1")


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    limit: Limit
    remaining: int
    wait_s: float  # until one token is back (0 when allowed)
    reset_s: float  # until the bucket is full again

    def headers(self) -> dict[str, str]:
        """The IETF RateLimit fields, and Retry-After when refused."""
        headers = {
            "RateLimit-Limit": str(self.limit.burst),
            "RateLimit-Remaining": str(self.remaining),
            "RateLimit-Reset": str(math.ceil(self.reset_s)),
        }
        if not self.allowed:
            headers["Retry-After"] = str(max(1, math.ceil(self.wait_s)))
        return headers

    def enforce(self, who: str) -> None:
        if not self.allowed:
            raise RateLimited(
                f"{who}: more than {self.limit.burst} requests at once or "
                f"{self.limit.rate:g} per second; retry in {max(1, math.ceil(self.wait_s))} s",
                headers=self.headers(),
            )


class LocalBuckets:
    """This process's buckets (least recently used dropped past ``capacity``)."""

    def __init__(self, capacity: int = 100_000, clock: Callable[[], float] = time.monotonic):
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._capacity = capacity
        self._clock = clock

    def take(self, key: str, limit: Limit, count: int = 1) -> Decision:
        now = self._clock()
        tokens, at = self._buckets.pop(key, (float(limit.burst), now))
        tokens = min(limit.burst, tokens + (now - at) * limit.rate)
        allowed = tokens >= count
        if allowed:
            tokens -= count
        self._buckets[key] = (tokens, now)
        if len(self._buckets) > self._capacity:
            self._buckets.popitem(last=False)
        return Decision(
            allowed=allowed,
            limit=limit,
            remaining=math.floor(tokens),
            wait_s=0.0 if allowed else (count - tokens) / limit.rate,
            reset_s=(limit.burst - tokens) / limit.rate,
        )


@dataclass(slots=True)
class _Lease:
    tokens: int
    expires: float
    remaining: int  # the shared bucket's, when leased
    reset_s: float


class RateLimiter:
    def __init__(
        self, redis: Redis | None, prefix: str, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._redis = redis
        self._prefix = f"{prefix}rl:"
        self._script = redis.register_script(_TAKE) if redis is not None else None
        self._local = LocalBuckets(clock=clock)
        self._leases: dict[str, _Lease] = {}
        self._asking: dict[str, asyncio.Future[Decision | None]] = {}
        self._clock = clock
        self._redis_down_until = 0.0
        # The last refusal of each subject, until its token is back (``refused``).
        self._refused: dict[str, tuple[float, Decision]] = {}
        self.redis_calls = 0

    def refused(self, subject: str) -> Decision | None:
        """The refusal ``take`` gave ``subject`` last, while no token can have come back since
        (from memory: no Redis call); None otherwise. For refusing before costly work."""
        held = self._refused.get(subject)
        if held is None:
            return None
        until, decision = held
        left = until - self._clock()
        if left <= 0:
            del self._refused[subject]
            return None
        return dataclasses.replace(decision, wait_s=left)

    def _remember(self, subject: str, decision: Decision) -> Decision:
        if not decision.allowed:
            if len(self._refused) > 100_000:
                self._refused.clear()
            self._refused[subject] = (self._clock() + decision.wait_s, decision)
        return decision

    async def take(self, subject: str, limit: Limit) -> Decision:
        """One token from ``subject``'s bucket (a client id, or ``ip:<address>``)."""
        return self._remember(subject, await self._take(subject, limit))

    async def take_many(self, subject: str, limit: Limit, count: int) -> Decision:
        """``count`` tokens at once, or none (a batch of transactions, each counted): from the
        lease when it holds them, else from the bucket, which grants them all or refuses.
        Not shared with other requests' asking, as a refusal of many says nothing of one."""
        if count > limit.burst:
            raise ValueError(f"{count} tokens are more than the bucket holds ({limit.burst})")
        now = self._clock()
        lease = self._leases.get(subject)
        if lease is not None and lease.expires <= now:
            lease = None
        if lease is not None and lease.tokens >= count:
            lease.tokens -= count
            return Decision(True, limit, lease.remaining + lease.tokens, 0.0, lease.reset_s)
        if self._script is None or now < self._redis_down_until:
            return self._remember(subject, self._local.take(subject, limit, count))
        kept = lease.tokens if lease is not None else 0
        decision = await self._lease(subject, limit, now, least=count - kept, kept=kept)
        return self._remember(subject, decision)

    async def _take(self, subject: str, limit: Limit) -> Decision:
        while True:
            now = self._clock()
            lease = self._leases.get(subject)
            if lease is not None and lease.tokens > 0 and lease.expires > now:
                lease.tokens -= 1
                return Decision(True, limit, lease.remaining + lease.tokens, 0.0, lease.reset_s)
            if self._script is None or now < self._redis_down_until:
                return self._local.take(subject, limit)
            asking = self._asking.get(subject)
            if asking is None:
                break
            # Another request is asking Redis for this subject: share its answer. A refusal
            # holds for us too; a lease (or Redis found down) is looked at again.
            refusal = await asyncio.shield(asking)
            if refusal is not None:
                return refusal
        asking = asyncio.get_running_loop().create_future()
        self._asking[subject] = asking
        decision: Decision | None = None
        try:
            decision = await self._lease(subject, limit, now)
            return decision
        finally:
            del self._asking[subject]
            asking.set_result(decision if decision is not None and not decision.allowed else None)

    async def _lease(
        self, subject: str, limit: Limit, now: float, *, least: int = 1, kept: int = 0
    ) -> Decision:
        """Lease tokens from the bucket and spend ``least`` of them (with the ``kept`` tokens
        of the lease it replaces, which are spent first). A lease's worth is asked for beside
        what is spent, less the one a single request spends itself: a batch leaves a lease
        behind it as a single request does, and the request after it (a batch's own first
        token, say) is served from memory, not by a call of its own."""
        lease = max(1, min(MAX_LEASE, math.ceil(limit.rate * 0.05), limit.burst // 4))
        wanted = least + lease - 1
        try:
            self.redis_calls += 1
            assert self._script is not None
            granted, remaining, wait_ms, reset_ms = await self._script(
                keys=[self._prefix + subject], args=[limit.rate, limit.burst, wanted, least]
            )
        except (RedisError, OSError) as exc:
            # Skip Redis for a second rather than pay its timeout on every request.
            self._redis_down_until = now + 1.0
            log.warning("limits.redis_unavailable", extra={"error": str(exc)[:200]})
            return self._local.take(subject, limit, least + kept)
        granted = int(granted)
        if granted == 0:
            if not kept:  # a lease's tokens too few for a batch still serve single requests
                self._leases.pop(subject, None)
            return Decision(False, limit, 0, int(wait_ms) / 1000, int(reset_ms) / 1000)
        if len(self._leases) > 100_000:
            self._leases.clear()
        left = granted - least  # with the ``kept`` ones, ``least + kept`` are spent
        self._leases[subject] = _Lease(left, now + LEASE_S, int(remaining), int(reset_ms) / 1000)
        return Decision(True, limit, int(remaining) + left, 0.0, int(reset_ms) / 1000)
