"""Spend policies: what a client may make the relayer's wallet pay for.

Every transaction Relay executes is paid from the relayer's wallet (gas always, and the
``value`` of direct and gasless requests alike), so each client has a policy:

- ``allowedTo``: destination contracts it may call (a gasless request's ``request.to``); empty
  means any;
- ``maxValueWei``: the most ``value`` one transaction may carry;
- ``dailyValueWei``: the most ``value`` its transactions may carry in any rolling 24 hours;
- ``maxGas``: the highest gas limit (a direct request must then name its ``gasLimit``);
- ``gaslessValue``: whether a gasless request may carry ``value`` at all (off by default:
  the signer asks for it, the relayer pays it).

The rules about one transaction are checked at accept (403 naming the rule) and again by the
consumer just before it submits, against the policy as it is then: an operator who tightens a
policy after a leak stops what is already queued.

The daily budget is counted in the database, so it holds however many API replicas accept at
once. Value is *reserved* in buckets of a client and five minutes (``client_spend``), and a
reservation that would take the sum of the buckets of the last 24 hours past the budget is
refused. Reservations of one client are made one at a time: each first locks the client's row
(an UPDATE, which MySQL and SQLite both serialise), then sums and adds. Two kinds:

- :func:`reserve`, a transaction's own value, inside the accept's transaction: a refused or
  rolled back request reserves nothing;
- :func:`take_lease`, a slice of the budget for one API process to spend from memory, in a
  short transaction of its own, given back (:func:`give_back`) when the process is done with
  it (relay_api/limits/budget.py says when each is used).

Either way, no two replicas can both spend the last of a budget. A reservation is kept
whatever becomes of the transaction (the conservative side). The consumer checks again that
the client's reservations of the last 24 hours are within its budget as it is now (true
unless an operator lowered it: then nothing more of it is sent).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from relay_core.db.models import ApiClient, ClientSpend, utcnow
from relay_core.errors import Forbidden
from relay_core.statuses import TxType

BUCKET = timedelta(minutes=5)
DAY = timedelta(hours=24)


class PolicyRefused(Forbidden):
    """A spend policy refuses the transaction; ``rule`` names it."""

    code = "policy_refused"

    def __init__(self, rule: str, detail: str) -> None:
        super().__init__(f"policy {rule}: {detail}")
        self.rule = rule


@dataclass(frozen=True, slots=True)
class Spend:
    """What a transaction asks the wallet for."""

    type: TxType
    to: str
    value: int
    gas: int | None

    @classmethod
    def of(cls, type_: TxType | str, request: dict[str, Any]) -> Spend:
        """From a stored (or about to be stored) request."""
        if TxType(type_) == TxType.gasless:
            fwd = request["request"]
            return cls(TxType.gasless, str(fwd["to"]), int(fwd["value"]), int(fwd["gas"]))
        gas = request.get("gasLimit")
        return cls(
            TxType.direct,
            str(request["to"]),
            int(request.get("value") or 0),
            int(gas) if gas else None,
        )


@dataclass(frozen=True, slots=True)
class SpendPolicy:
    allowed_to: frozenset[str] = frozenset()  # lowercase; empty: any
    max_value_wei: int | None = None
    daily_value_wei: int | None = None
    max_gas: int | None = None
    gasless_value: bool = False

    @classmethod
    def of(cls, client: ApiClient) -> SpendPolicy:
        return cls(
            allowed_to=frozenset(a.lower() for a in client.policy_allowed_to or ()),
            max_value_wei=_int(client.policy_max_value_wei),
            daily_value_wei=_int(client.policy_daily_value_wei),
            max_gas=client.policy_max_gas,
            gasless_value=bool(client.policy_gasless_value),
        )

    def check(self, spend: Spend) -> None:
        """The rules about this one transaction; :class:`PolicyRefused` naming the first
        broken."""
        if self.allowed_to and spend.to.lower() not in self.allowed_to:
            raise PolicyRefused(
                "allowedTo", f"{spend.to} is not among this client's allowed destinations"
            )
        if spend.type == TxType.gasless and spend.value > 0 and not self.gasless_value:
            raise PolicyRefused(
                "gaslessValue",
                "a gasless request may not carry value (the relayer would pay it); "
                "an operator can allow it for this client",
            )
        if self.max_value_wei is not None and spend.value > self.max_value_wei:
            raise PolicyRefused(
                "maxValueWei",
                f"value {spend.value} is above this client's {self.max_value_wei} wei "
                "per transaction",
            )
        if self.max_gas is not None:
            if spend.gas is None:
                raise PolicyRefused(
                    "maxGas", f"gasLimit is required (this client's limit is {self.max_gas})"
                )
            if spend.gas > self.max_gas:
                raise PolicyRefused(
                    "maxGas", f"gas {spend.gas} is above this client's limit of {self.max_gas}"
                )

    def view(self) -> dict[str, Any]:
        """The policy as the API and the CLI show it (wei as decimal strings)."""
        return {
            "allowedTo": sorted(self.allowed_to),
            "maxValueWei": _str(self.max_value_wei),
            "dailyValueWei": _str(self.daily_value_wei),
            "maxGas": self.max_gas,
            "gaslessValue": self.gasless_value,
        }


NO_POLICY = SpendPolicy()  # what a new client has: any destination and value, no gasless value


def apply(client: ApiClient, changes: dict[str, Any]) -> None:
    """Set the fields of ``changes`` (keys as in :meth:`SpendPolicy.view`; None clears a
    limit, an empty list allows any destination). Values are checked by the caller."""
    if "allowedTo" in changes:
        client.policy_allowed_to = sorted({a.lower() for a in changes["allowedTo"] or ()}) or None
    if "maxValueWei" in changes:
        client.policy_max_value_wei = _str(changes["maxValueWei"])
    if "dailyValueWei" in changes:
        client.policy_daily_value_wei = _str(changes["dailyValueWei"])
    if "maxGas" in changes:
        client.policy_max_gas = changes["maxGas"]
    if "gaslessValue" in changes:
        client.policy_gasless_value = bool(changes["gaslessValue"])


def _int(text: str | None) -> int | None:
    return None if text is None else int(text)


def _str(value: int | str | None) -> str | None:
    return None if value is None else str(int(value))


def bucket_of(moment: datetime) -> datetime:
    """The start of the five minutes holding ``moment``."""
    return moment.replace(minute=moment.minute - moment.minute % 5, second=0, microsecond=0)


async def spent_today(
    session: AsyncSession, client_id: str, now: datetime, *, latest: bool = False
) -> int:
    """Value reserved by the client in the buckets of the last 24 hours (the bucket holding
    ``now - 24 h`` included: the window errs by at most five minutes, towards refusing).
    ``latest``: a locking read, which sees the latest commits whatever the isolation level."""
    query = select(ClientSpend.value_wei).where(
        ClientSpend.client_id == client_id, ClientSpend.bucket >= bucket_of(now - DAY)
    )
    rows = await session.execute(query.with_for_update() if latest else query)
    # Summed here, exactly: wei do not fit a float, and MySQL's DECIMAL stops at 65 digits.
    return sum(int(v) for v in rows.scalars())


async def reserve(
    session: AsyncSession, client_id: str, policy: SpendPolicy, value: int, now: datetime
) -> None:
    """Reserve ``value`` against the client's daily budget, or refuse. Runs in the accept's
    transaction, before anything else in it; the client stays locked until it commits."""
    if policy.daily_value_wei is None or value == 0:
        return
    budget = await _lock_budget(session, client_id)
    if budget is None:
        return
    spent = await spent_today(session, client_id, now, latest=True)
    if spent + value > budget:
        raise PolicyRefused(
            "dailyValueWei",
            f"value {value} would take this client's last 24 hours to {spent + value} wei, "
            f"above its budget of {budget} (spent {spent})",
        )
    await _add(session, client_id, bucket_of(now), value, now)


@dataclass(frozen=True, slots=True)
class Lease:
    """A slice of a client's budget reserved for one API process to spend without asking."""

    budget: int  # the budget it was taken under
    bucket: datetime  # where it is counted (and given back)
    amount: int  # 0: no lease now (the budget is nearly spent, or the value is large)


async def take_lease(
    session: AsyncSession,
    client_id: str,
    value: int,
    now: datetime,
    *,
    parts: int,
    reserve_part: int,
    returning: tuple[datetime, int] | None = None,
) -> Lease | None:
    """In its own short transaction: give back ``returning`` (the unspent rest of this
    process's previous lease) and reserve a lease of ``budget // parts`` for a transaction of
    ``value`` and those after it. No lease (amount 0) when it would hold less than two such
    values, or leave less than ``budget // reserve_part`` of the budget unleased: the caller
    then reserves exactly, in its own transaction, which refuses what does not fit. None when
    the client has no budget (any more)."""
    budget = await _lock_budget(session, client_id)
    if returning is not None:
        await _add(session, client_id, *returning, now, giving_back=True)
    if budget is None:
        return None
    spent = await spent_today(session, client_id, now, latest=True)
    size = budget // parts
    bucket = bucket_of(now)
    if size < 2 * value or budget - spent - size < budget // reserve_part:
        return Lease(budget, bucket, 0)
    await _add(session, client_id, bucket, size, now)
    return Lease(budget, bucket, size)


async def give_back(
    session: AsyncSession, client_id: str, bucket: datetime, amount: int, now: datetime
) -> None:
    """Return the unspent rest of a lease to the budget."""
    await _lock_budget(session, client_id)
    await _add(session, client_id, bucket, amount, now, giving_back=True)


async def _lock_budget(session: AsyncSession, client_id: str) -> int | None:
    """Lock the client's budget and read it. Every change to a client's reservations writes
    its row first, so they queue here (an UPDATE, which MySQL and SQLite both serialise); the
    budget is read after, as it is now (the caller's policy may be a cached copy)."""
    await session.execute(
        update(ApiClient)
        .where(ApiClient.id == client_id)
        .values(policy_spend_lock=ApiClient.policy_spend_lock + 1)
    )
    return _int(
        await session.scalar(
            select(ApiClient.policy_daily_value_wei).where(ApiClient.id == client_id)
        )
    )


async def _add(
    session: AsyncSession,
    client_id: str,
    bucket: datetime,
    amount: int,
    now: datetime,
    *,
    giving_back: bool = False,
) -> None:
    """Add ``amount`` to the client's ``bucket`` (or take it off, ``giving_back``)."""
    existing = await session.scalar(
        select(ClientSpend.value_wei).where(
            ClientSpend.client_id == client_id, ClientSpend.bucket == bucket
        )
    )
    if existing is not None:
        total = int(existing) - amount if giving_back else int(existing) + amount
        await session.execute(
            update(ClientSpend)
            .where(ClientSpend.client_id == client_id, ClientSpend.bucket == bucket)
            .values(value_wei=str(max(0, total)))
        )
    elif not giving_back:  # (a bucket given back to after it was forgotten: nothing to do)
        await session.execute(
            insert(ClientSpend).values(client_id=client_id, bucket=bucket, value_wei=str(amount))
        )
        # A new bucket every five minutes at most: the time to forget the old ones.
        await session.execute(
            delete(ClientSpend).where(
                ClientSpend.client_id == client_id, ClientSpend.bucket < bucket_of(now - DAY)
            )
        )


async def over_budget(
    session: AsyncSession, client_id: str, policy: SpendPolicy, now: datetime
) -> int | None:
    """The consumer's check: the client's reservations of the last 24 hours, if they are
    above its budget as it is now; None when within it (or there is no budget)."""
    if policy.daily_value_wei is None:
        return None
    spent = await spent_today(session, client_id, now)
    return spent if spent > policy.daily_value_wei else None


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

    async def over_budget(self, client_id: str, policy: SpendPolicy) -> int | None:
        """:func:`over_budget`, at most ``ttl_s`` old, for this budget."""
        if policy.daily_value_wei is None:
            return None
        key = ("over", client_id, policy.daily_value_wei)
        return await self._cached(key, lambda: self._over_budget(client_id, policy))

    async def _policy(self, client_id: str) -> SpendPolicy | None:
        async with self._sessions() as session:
            client = await session.get(ApiClient, client_id)
        return None if client is None else SpendPolicy.of(client)

    async def _over_budget(self, client_id: str, policy: SpendPolicy) -> int | None:
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
