"""Versioned status cache in Redis.

Each entry is ``"<version>|<json>"`` where version is the row's ``version`` column. The write
is a compare-and-set in Lua: it lands only if no entry exists or the stored version is lower,
so a reader backfilling from an older read can never replace what a writer just committed.
Beside each entry a *floor* (``…:v``, the highest version written) outlives it by at least a
minute: an entry that expires (or is evicted) while a reader still holds an older read does
not let that reader's backfill in either.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from redis.asyncio import Redis
from redis.exceptions import NoScriptError, RedisError

from relay_core import jsonutil

log = logging.getLogger(__name__)

_PUT_IF_NEWER = """
local version = tonumber(ARGV[1])
local current = redis.call('GET', KEYS[1])
if current then
  local sep = string.find(current, '|', 1, true)
  if sep and tonumber(string.sub(current, 1, sep - 1)) >= version then
    return 0
  end
end
local floor = tonumber(redis.call('GET', KEYS[2]) or '0')
if floor > version then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. ARGV[2], 'EX', ARGV[3])
redis.call('SET', KEYS[2], ARGV[1], 'EX', math.max(tonumber(ARGV[3]), 60))
return 1
"""


@dataclass(frozen=True, slots=True)
class CacheWrite:
    transaction_id: str
    version: int
    entry: dict[str, Any]
    terminal: bool


def connect(url: str, timeout_s: float) -> Redis:
    return Redis.from_url(
        url,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        health_check_interval=30,
    )


class CacheSettings(Protocol):
    redis_prefix: str
    status_cache_terminal_ttl_s: int
    status_cache_active_ttl_s: int


class StatusCache:
    @classmethod
    def configured(cls, redis: Redis | None, settings: CacheSettings) -> StatusCache | None:
        """The cache as ``settings`` describe it, on ``redis`` (None without one)."""
        if redis is None:
            return None
        return cls(
            redis,
            settings.redis_prefix,
            terminal_ttl_s=settings.status_cache_terminal_ttl_s,
            active_ttl_s=settings.status_cache_active_ttl_s,
        )

    def __init__(
        self, redis: Redis, prefix: str, *, terminal_ttl_s: int = 600, active_ttl_s: int = 10
    ) -> None:
        self._redis = redis
        self._prefix = prefix
        self._terminal_ttl_s = terminal_ttl_s
        self._active_ttl_s = active_ttl_s
        self._put = redis.register_script(_PUT_IF_NEWER)
        self.errors = 0
        # After a failure Redis is skipped for a moment, so an outage costs one timeout per
        # second instead of one per request.
        self._skip_until = 0.0
        self.backoff_s = 1.0

    def key(self, transaction_id: str) -> str:
        return f"{self._prefix}tx:{transaction_id}"

    @property
    def available(self) -> bool:
        return time.monotonic() >= self._skip_until

    def _failed(self, action: str, transaction_id: str, exc: BaseException) -> None:
        self.errors += 1
        self._skip_until = time.monotonic() + self.backoff_s
        log.warning(
            f"cache.{action}_failed",
            extra={"transactionId": transaction_id, "error": type(exc).__name__},
        )

    async def get(self, transaction_id: str) -> tuple[int, dict[str, Any]] | None:
        """The cached entry, or None on a miss. Redis errors propagate to the caller."""
        raw = await self._redis.get(self.key(transaction_id))
        if raw is None:
            return None
        version, _, body = (raw if isinstance(raw, bytes) else raw.encode()).partition(b"|")
        return int(version), jsonutil.loads(body)

    async def get_quietly(self, transaction_id: str) -> tuple[int, dict[str, Any]] | None:
        """Read for a status lookup: Redis down is a miss, logged and counted."""
        if not self.available:
            return None
        try:
            return await self.get(transaction_id)
        except (RedisError, OSError) as exc:
            self._failed("read", transaction_id, exc)
            return None

    async def put(
        self, transaction_id: str, version: int, entry: dict[str, Any], terminal: bool
    ) -> bool:
        """Store ``entry`` unless a newer version is already there. Redis errors propagate."""
        keys, args = self._script_call(CacheWrite(transaction_id, version, entry, terminal))
        return bool(await self._put(keys=keys, args=args))

    def _script_call(self, write: CacheWrite) -> tuple[list[str], list[Any]]:
        """The put-if-newer script's keys and arguments for one entry."""
        ttl = self._terminal_ttl_s if write.terminal else self._active_ttl_s
        key = self.key(write.transaction_id)
        return [key, key + ":v"], [write.version, jsonutil.dumps(write.entry), ttl]

    async def put_quietly(
        self, transaction_id: str, version: int, entry: dict[str, Any], terminal: bool
    ) -> bool:
        """Write-through after a commit: a Redis failure is logged and counted, never raised."""
        if not self.available:
            return False
        try:
            return await self.put(transaction_id, version, entry, terminal)
        except (RedisError, OSError) as exc:
            self._failed("write", transaction_id, exc)
            return False

    async def put_many(self, entries: Sequence[CacheWrite]) -> list[bool]:
        """:meth:`put` for several entries in one pipelined round trip of EVALSHAs. Only a
        Redis that does not know the script yet (restarted, flushed) costs more: the script is
        loaded and the writes sent again, which their version check makes harmless. (A
        pipeline of redis-py's script objects asks SCRIPT EXISTS first, every time: a second
        round trip per batch.) Redis errors propagate."""
        if not entries:
            return []
        calls = [self._script_call(write) for write in entries]
        for attempt in range(2):
            async with self._redis.pipeline(transaction=False) as pipe:
                for keys, args in calls:
                    pipe.evalsha(self._put.sha, len(keys), *keys, *args)
                stored = await pipe.execute(raise_on_error=False)
            if attempt == 0 and any(isinstance(value, NoScriptError) for value in stored):
                await self._redis.script_load(_PUT_IF_NEWER)
                continue
            break
        for value in stored:
            if isinstance(value, Exception):
                raise value
        return [bool(value) for value in stored]

    async def put_many_quietly(self, entries: Sequence[CacheWrite]) -> None:
        """Write-through of a committed batch: a Redis failure is logged and counted."""
        if not entries or not self.available:
            return
        try:
            await self.put_many(entries)
        except (RedisError, OSError) as exc:
            self._failed("write", entries[0].transaction_id, exc)
