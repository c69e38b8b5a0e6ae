"""Versioned status cache in Redis.

Each entry is ``"<version>|<json>"`` where version is the row's ``version`` column. The write
is a compare-and-set in Lua: it lands only if no entry exists or the stored version is lower,
so a reader backfilling from an older read can never replace what a writer just committed.
Beside each entry a *floor* (``…:v``, the highest version written) outlives it by at least a
minute: an entry that expires (or is evicted) while a reader still holds an older read does
not let that reader's backfill in either.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from redis.asyncio import Redis
from redis.exceptions import NoScriptError, RedisError

from relay_core import jsonutil
from relay_core.db.models import Transaction
from relay_core.statuses import is_terminal
from relay_core.views import status_entry
from relay_wire.resp import RespClient

log = logging.getLogger(__name__)

# For each entry i: KEYS[2i-1] the entry, KEYS[2i] its floor; ARGV[3i-2] the version,
# ARGV[3i-1] the JSON, ARGV[3i] the time to live. Returns 1 for each entry written, else 0.
_PUT_IF_NEWER = """
local stored = {}
for i = 1, #KEYS / 2 do
  local key, floor_key = KEYS[2 * i - 1], KEYS[2 * i]
  local version = tonumber(ARGV[3 * i - 2])
  local ttl = tonumber(ARGV[3 * i])
  local newer = 1
  local current = redis.call('GET', key)
  if current then
    local sep = string.find(current, '|', 1, true)
    if sep and tonumber(string.sub(current, 1, sep - 1)) >= version then
      newer = 0
    end
  end
  if newer == 1 and tonumber(redis.call('GET', floor_key) or '0') > version then
    newer = 0
  end
  if newer == 1 then
    redis.call('SET', key, ARGV[3 * i - 2] .. '|' .. ARGV[3 * i - 1], 'EX', ttl)
    redis.call('SET', floor_key, ARGV[3 * i - 2], 'EX', math.max(ttl, 60))
  end
  stored[i] = newer
end
return stored
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
    def configured(
        cls, redis: Redis | RespClient | None, settings: CacheSettings
    ) -> StatusCache | None:
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
        self,
        redis: Redis | RespClient,
        prefix: str,
        *,
        terminal_ttl_s: int = 600,
        active_ttl_s: int = 10,
    ) -> None:
        """``redis``: what sends the cache's commands (GET, EVALSHA, SCRIPT LOAD): the
        services give it a :class:`relay_wire.resp.RespClient`, which costs a fifth of
        redis-py's CPU a command; a redis-py client works the same."""
        self._redis = redis
        self._prefix = prefix
        self._terminal_ttl_s = terminal_ttl_s
        self._active_ttl_s = active_ttl_s
        self._put_sha = hashlib.sha1(_PUT_IF_NEWER.encode()).hexdigest()  # noqa: S324 (Redis's)
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
        (stored,) = await self.put_many([CacheWrite(transaction_id, version, entry, terminal)])
        return stored

    def _script_call(self, write: CacheWrite) -> tuple[list[str], list[Any]]:
        """The put-if-newer script's keys and arguments for one entry."""
        ttl = self._terminal_ttl_s if write.terminal else self._active_ttl_s
        key = self.key(write.transaction_id)
        return [key, key + ":v"], [write.version, jsonutil.dumps(write.entry), ttl]

    async def put_row_quietly(self, tx: Transaction) -> bool:
        """:meth:`put_quietly` of a row as just committed: its view, version and finality."""
        return await self.put_quietly(
            tx.id, tx.version, status_entry(tx), terminal=is_terminal(tx.status)
        )

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
        """:meth:`put` for several entries in one call of the script, which goes through them
        in turn (one command for the batch: a pipeline of one call per entry cost twice the
        client's CPU, and redis-py asked SCRIPT EXISTS before each). A Redis that does not
        know the script (restarted, flushed) is given it and asked again. Redis errors
        propagate."""
        if not entries:
            return []
        keys: list[str] = []
        args: list[Any] = []
        for write in entries:
            entry_keys, entry_args = self._script_call(write)
            keys.extend(entry_keys)
            args.extend(entry_args)
        try:
            stored = await self._redis.evalsha(self._put_sha, len(keys), *keys, *args)
        except NoScriptError:  # a Redis restarted or flushed since: give it the script
            await self._redis.script_load(_PUT_IF_NEWER)
            stored = await self._redis.evalsha(self._put_sha, len(keys), *keys, *args)
        return [bool(value) for value in stored]

    async def put_many_quietly(self, entries: Sequence[CacheWrite]) -> None:
        """Write-through of a committed batch: a Redis failure is logged and counted."""
        if not entries or not self.available:
            return
        try:
            await self.put_many(entries)
        except (RedisError, OSError) as exc:
            self._failed("write", entries[0].transaction_id, exc)
