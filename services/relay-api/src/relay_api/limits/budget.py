"""Daily budgets at accept, leased: a process reserves a slice of a client's budget in one
short transaction and spends it from memory, so a budgeted client's accepts do not each lock
its row and sum its day (five statements, ~4 ms of CPU, and one client serialised on its row).
A client may have two budgets, its value's and its fees' (``relay_core.spending.VALUE`` and
``FEE``): each has its own leases, and a transaction takes from both or from neither.

The budget stays strict across replicas, because a lease is a reservation like any other: it
is counted in ``client_spend`` when it is taken, so what all the processes hold and what they
reserved exactly never add up past the budget. What a process does not spend is given back
when the lease ends (after ``lease_s``, when the client's budget changes, at shutdown); a
process that dies with a lease leaves its rest counted as spent for the day, which errs
towards refusing.

Leases are for budgets that are far from spent: a lease is 1/``PARTS`` of the budget, taken
only while more than 1/``RESERVE_PART`` of it would stay unleased and only for values it holds
at least twice over. Past that (the end of a budget, or transactions large beside it) each
transaction reserves exactly in its own transaction, as ``relay_core.spending.reserve`` always
did, which refuses exactly what does not fit. A transaction can then be refused while another
replica still holds a lease with room in it; that lease ends within ``lease_s`` and the room
comes back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from relay_core import policy, spending
from relay_core.db.models import utcnow

log = logging.getLogger(__name__)

PARTS = 32
RESERVE_PART = 4


@dataclass(slots=True)
class _Lease:
    budget: int
    bucket: datetime
    left: int
    expires: float


GiveBack = Callable[[], None]
# Leases are kept per client and budget.
_Key = tuple[str, str]


def _nothing() -> None:
    return None


@dataclass(frozen=True, slots=True)
class Reserved:
    """What an accept reserved: ``give_back`` if its row is not committed after all, and the
    bucket it is counted in (None: nothing was reserved)."""

    give_back: GiveBack
    bucket: datetime | None


NOTHING = Reserved(_nothing, None)


class Budgets:
    """This process's budget leases, one per client that has a daily budget."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        lease_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sessions = sessions
        self._lease_s = lease_s
        self._clock = clock
        self._leases: dict[_Key, _Lease] = {}
        # Budgets that had no room for a lease: reserve exactly until then.
        self._exact_until: dict[_Key, float] = {}
        self._asking: dict[_Key, asyncio.Lock] = {}
        self.lease_calls = 0

    async def reserve(
        self,
        session: Callable[[], AsyncSession],
        client_id: str,
        spend_policy: policy.SpendPolicy,
        value: int,
        fee: int = 0,
    ) -> Reserved:
        """Reserve ``value`` and ``fee`` of the client's daily budgets for a transaction about
        to be written in ``session()`` (opened only if this needs it), or refuse
        (:class:`relay_core.policy.PolicyRefused`, naming the budget). Call its ``give_back``
        if that transaction is not committed after all (a reservation made in ``session()``
        itself goes with its rollback; one taken from a lease is given back to it)."""
        taken: list[GiveBack] = []
        buckets: list[datetime] = []
        exact: list[spending.Kind] = []
        for kind, amount in ((spending.VALUE, value), (spending.FEE, fee)):
            budget = kind.of(spend_policy)
            if budget is None or amount == 0:
                continue
            leased = await self._leased((client_id, kind.rule), kind, budget, amount)
            if leased is None:
                exact.append(kind)
                continue
            give_back, bucket = leased
            taken.append(give_back)
            buckets.append(bucket)
        if exact:
            try:
                exact_bucket = await spending.reserve(
                    session(), client_id, spend_policy, value, utcnow(), fee=fee, kinds=tuple(exact)
                )
            except policy.PolicyRefused:
                for give_back in taken:
                    give_back()
                raise
            if exact_bucket is not None:
                buckets.append(exact_bucket)
        if not buckets:
            return NOTHING

        def give_back_all() -> None:
            for give_back in taken:
                give_back()

        # The oldest: the reservation leaves the 24 hours with it (relay_core.spending).
        return Reserved(give_back_all, min(buckets))

    async def _leased(
        self, key: _Key, kind: spending.Kind, budget: int, amount: int
    ) -> tuple[GiveBack, datetime] | None:
        """From this process's lease of the budget (a new one if it may), or None: reserve
        exactly."""
        leased = self._from_lease(key, budget, amount)
        if leased is None and self._may_lease(key, budget, amount):
            # One lease request per budget at a time; the others wait for it and then look
            # at the lease again (a thousand requests must not each take a slice).
            lock = self._asking.setdefault(key, asyncio.Lock())
            async with lock:
                leased = self._from_lease(key, budget, amount)
                if leased is None and self._may_lease(key, budget, amount):
                    leased = await self._new_lease(key, kind, amount)
        return leased

    def _may_lease(self, key: _Key, budget: int, value: int) -> bool:
        return budget // PARTS >= 2 * value and self._exact_until.get(key, 0.0) <= self._clock()

    def _from_lease(self, key: _Key, budget: int, value: int) -> tuple[GiveBack, datetime] | None:
        lease = self._leases.get(key)
        if lease is None or lease.left < value:
            return None
        if lease.budget != budget or lease.expires <= self._clock():
            return None  # ended: the next lease request gives its rest back
        return _spend(lease, value), lease.bucket

    async def _new_lease(
        self, key: _Key, kind: spending.Kind, value: int
    ) -> tuple[GiveBack, datetime] | None:
        old = self._leases.pop(key, None)
        returning = (old.bucket, old.left) if old is not None and old.left > 0 else None
        self.lease_calls += 1
        # (If this fails, the old lease's rest stays counted as spent: whether its giving
        # back was committed cannot be known for sure, and counting it twice would let more
        # through than the budget.)
        async with self._sessions() as session, session.begin():
            lease = await spending.take_lease(
                session,
                key[0],
                value,
                utcnow(),
                parts=PARTS,
                reserve_part=RESERVE_PART,
                returning=returning,
                kind=kind,
            )
        if lease is None or lease.amount == 0:
            if lease is not None:  # the budget is nearly spent: reserve exactly for a while
                self._exact_until[key] = self._clock() + self._lease_s
            return None
        new = _Lease(lease.budget, lease.bucket, lease.amount, self._clock() + self._lease_s)
        self._leases[key] = new
        # From the new lease even if this request's copy of the budget is older than the
        # database's: the lease is within the budget as it is now.
        return _spend(new, value), new.bucket

    async def give_back_ended(self, *, all_of_them: bool = False) -> int:
        """Give back the rest of every lease that has ended (every lease, ``all_of_them``);
        returns how many had ended (one being renewed right now is left to its renewal)."""
        now = self._clock()
        ended = [
            (key, lease)
            for key, lease in self._leases.items()
            if all_of_them or lease.expires <= now
        ]
        for key, lease in ended:
            asking = self._asking.get(key)
            if self._leases.get(key) is lease and (asking is None or not asking.locked()):
                del self._leases[key]
                if lease.left > 0:
                    await self._give_back(key, lease)
        for key, until in list(self._exact_until.items()):
            if until <= now:
                del self._exact_until[key]
        return len(ended)

    async def _give_back(self, key: _Key, lease: _Lease) -> None:
        left, lease.left = lease.left, 0  # a late give-back to it is lost, not double counted
        kind = spending.VALUE if key[1] == spending.VALUE.rule else spending.FEE
        try:
            async with self._sessions() as session, session.begin():
                await spending.give_back(session, key[0], lease.bucket, left, utcnow(), kind=kind)
        except Exception as exc:  # the database is down: the rest stays counted as spent
            log.warning(
                "limits.budget_give_back_failed",
                extra={
                    "client_id": key[0],
                    "budget": key[1],
                    "wei": str(left),
                    "error": str(exc)[:200],
                },
            )

    async def run(self, interval_s: float = 1.0) -> None:
        """Give back ended leases as they end."""
        while True:
            await asyncio.sleep(interval_s)
            await self.give_back_ended()

    async def close(self) -> None:
        """At shutdown: give back every lease's rest."""
        await self.give_back_ended(all_of_them=True)


def _spend(lease: _Lease, value: int) -> GiveBack:
    lease.left -= value

    def give_back() -> None:
        lease.left += value  # (to a lease already ended, it is lost: counted as spent)

    return give_back
