"""The consumer's cache of clients' spend policies (relay_core.policy) and of whether their
reservations are over their daily budgets (relay_core.spending)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from relay_core.db.models import ApiClient, utcnow
from relay_core.policy import SpendPolicy
from relay_core.spending import Kind, over_budget


class PolicyCache:
    """Clients' policies as the consumer reads them: from the database at most every
    ``ttl_s`` per client, so a changed policy applies to what is queued within seconds; and,
    as often, whether a client's reservations are over its budget (true only once an operator
    has lowered it), so a budgeted client's messages do not each sum its day.

    One read at a time per client: the messages that find an entry missing or expired while
    its read is under way wait for that read (without it, the hundreds of messages a consumer holds
    each summed the client's day every time the entry expired)."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        ttl_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sessions = sessions
        self._ttl_s = ttl_s
        self._clock = clock
        self._known: dict[Any, tuple[Any, float]] = {}
        self._reading: dict[Any, asyncio.Future[Any]] = {}
        self.reads = 0  # (tests and the curious)

    async def get(self, client_id: str) -> SpendPolicy | None:
        return await self._cached(("policy", client_id), lambda: self._policy(client_id))

    async def over_budget(self, client_id: str, policy: SpendPolicy) -> list[tuple[Kind, int]]:
        """:func:`over_budget`, at most ``ttl_s`` old, for these budgets."""
        if policy.daily_value_wei is None and policy.daily_fee_wei is None:
            return []
        key = ("over", client_id, policy.daily_value_wei, policy.daily_fee_wei)
        return await self._cached(key, lambda: self._over_budget(client_id, policy))

    async def _policy(self, client_id: str) -> SpendPolicy | None:
        async with self._sessions() as session:
            client = await session.get(ApiClient, client_id)
        return None if client is None else SpendPolicy.of(client)

    async def _over_budget(self, client_id: str, policy: SpendPolicy) -> list[tuple[Kind, int]]:
        async with self._sessions() as session:
            return await over_budget(session, client_id, policy, utcnow())

    async def _cached(self, key: Any, read: Callable[[], Awaitable[Any]]) -> Any:
        now = self._clock()
        known = self._known.get(key)
        if known is not None and known[1] > now:
            return known[0]
        reading = self._reading.get(key)
        if reading is None:
            # A task of its own: a waiter cancelled (its message timed out) must not cancel
            # the read the others wait for.
            reading = self._reading[key] = asyncio.ensure_future(self._read(key, read))
            # (its failure is the waiters'; retrieved here too, in case all of them left)
            reading.add_done_callback(lambda done: done.cancelled() or done.exception())
        return await asyncio.shield(reading)

    async def _read(self, key: Any, read: Callable[[], Awaitable[Any]]) -> Any:
        try:
            self.reads += 1
            value = await read()
            if len(self._known) > 100_000:
                self._known.clear()
            self._known[key] = (value, self._clock() + self._ttl_s)
            return value
        finally:
            del self._reading[key]
