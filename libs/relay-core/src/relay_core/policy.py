"""Spend policies: what a client may make the relayer's wallet pay for.

Every transaction Relay executes is paid from the relayer's wallet (gas always, and the
``value`` of direct and gasless requests alike), so nothing spends unless someone chose that it
may: a client may submit nothing until an operator grants it a policy (``relay keys create``
with its options, ``relay clients policy``, ``PATCH /api/v1/admin/clients/{id}``; the rule
``noPolicy`` until then). A policy is:

- ``allowedTo``: destination contracts it may call (a gasless request's ``request.to``); empty
  means any;
- ``maxValueWei``: the most ``value`` one transaction may carry;
- ``dailyValueWei``: the most ``value`` its transactions may carry in any rolling 24 hours;
- ``maxGas``: the highest gas limit (a direct request must then name its ``gasLimit``);
- ``gaslessValue``: whether a gasless request may carry ``value`` at all (off by default:
  the signer asks for it, the relayer pays it);
- ``maxFeeWei``: the most fee one transaction may cost: its gas limit times the most a unit of
  gas can cost at its speed (relay_core.fees), judged at accept (a direct request must then
  name its ``gasLimit``);
- ``dailyFeeWei``: the most fee its transactions may cost in any rolling 24 hours: reserved at
  accept at that most, settled to the receipt's fee (gas used x effective price) once mined;
- ``speeds``: the speeds it may ask for (empty: any; ``fastest`` pays twice ``safeLow``'s).

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

from relay_core import fees
from relay_core.db.models import ApiClient, ClientSpend, utcnow
from relay_core.errors import Forbidden
from relay_core.statuses import TxType

BUCKET = timedelta(minutes=5)
# The forwarder's own gas above a gasless request's (RELAY_FORWARDER_GAS_OVERHEAD's default).
FORWARDER_GAS_OVERHEAD = 60_000
DAY = timedelta(hours=24)


class PolicyRefused(Forbidden):
    """A spend policy refuses the transaction; ``rule`` names it."""

    code = "policy_refused"

    def __init__(self, rule: str, detail: str) -> None:
        super().__init__(f"policy {rule}: {detail}")
        self.rule = rule


@dataclass(frozen=True, slots=True)
class Spend:
    """What a transaction asks the wallet for: its ``value``, the ``gas`` its request names
    (``maxGas`` judges it), its ``speed``, and ``fee``, the most it can cost in fees (None:
    unknown, its gas limit is not named, or no price was given)."""

    type: TxType
    to: str
    value: int
    gas: int | None
    speed: str = fees.DEFAULT_SPEED
    fee: int | None = None

    @classmethod
    def of(
        cls,
        type_: TxType | str,
        request: dict[str, Any],
        *,
        fee_per_gas: int | None = None,
        forwarder_overhead: int = FORWARDER_GAS_OVERHEAD,
    ) -> Spend:
        """From a stored (or about to be stored) request; ``fee_per_gas``: the most a unit of
        gas can cost at its speed, to work out ``fee``."""
        if TxType(type_) == TxType.gasless:
            fwd = request["request"]
            gas = int(fwd["gas"])
            # The forwarder's execute: the request's gas and the forwarder's own, at the
            # speed the consumer sends gasless requests with.
            sent = gas + forwarder_overhead
            fee = None if fee_per_gas is None else sent * fee_per_gas
            return cls(TxType.gasless, str(fwd["to"]), int(fwd["value"]), gas, "fast", fee)
        named = request.get("gasLimit")
        gas_limit = int(named) if named else None
        return cls(
            TxType.direct,
            str(request["to"]),
            int(request.get("value") or 0),
            gas_limit,
            str(request.get("speed") or fees.DEFAULT_SPEED),
            None if fee_per_gas is None else fees.fee_of(gas_limit, fee_per_gas),
        )


@dataclass(frozen=True, slots=True)
class SpendPolicy:
    granted: bool = False  # an operator chose that this client may spend (else: nothing)
    revoked: bool = False  # its key was revoked: nothing it queued is sent any more
    allowed_to: frozenset[str] = frozenset()  # lowercase; empty: any
    max_value_wei: int | None = None
    daily_value_wei: int | None = None
    max_gas: int | None = None
    gasless_value: bool = False
    max_fee_wei: int | None = None
    daily_fee_wei: int | None = None
    speeds: frozenset[str] = frozenset()  # empty: any

    @classmethod
    def of(cls, client: ApiClient) -> SpendPolicy:
        return cls(
            granted=client.policy_granted_at is not None,
            revoked=client.revoked_at is not None,
            allowed_to=frozenset(a.lower() for a in client.policy_allowed_to or ()),
            max_value_wei=_int(client.policy_max_value_wei),
            daily_value_wei=_int(client.policy_daily_value_wei),
            max_gas=client.policy_max_gas,
            gasless_value=bool(client.policy_gasless_value),
            max_fee_wei=_int(client.policy_max_fee_wei),
            daily_fee_wei=_int(client.policy_daily_fee_wei),
            speeds=frozenset(client.policy_speeds or ()),
        )

    @property
    def prices_fees(self) -> bool:
        """Whether a transaction's most fee must be known to judge it (a fee rule is set)."""
        return self.max_fee_wei is not None or self.daily_fee_wei is not None

    @property
    def unlimited(self) -> bool:
        """Granted with no limit at all: any destination, value, gas and fee (flagged to
        operators)."""
        return self.granted and not (
            self.allowed_to
            or self.max_value_wei is not None
            or self.daily_value_wei is not None
            or self.max_gas is not None
            or self.prices_fees
        )

    def check(self, spend: Spend) -> None:
        """The rules about this one transaction; :class:`PolicyRefused` naming the first
        broken."""
        if self.revoked:
            raise PolicyRefused(
                "revoked", "this client's key was revoked: nothing it queued is sent"
            )
        if not self.granted:
            raise PolicyRefused(
                "noPolicy",
                "this client has no spend policy yet, so it may submit nothing: an operator "
                "grants one (relay clients policy NAME ..., or PATCH /api/v1/admin/clients/NAME)",
            )
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
        if self.speeds and spend.speed not in self.speeds:
            raise PolicyRefused(
                "speeds",
                f"speed {spend.speed} is not among this client's: "
                + ", ".join(sorted(self.speeds)),
            )
        if self.prices_fees:
            rule = "maxFeeWei" if self.max_fee_wei is not None else "dailyFeeWei"
            if spend.fee is None:
                raise PolicyRefused(
                    rule,
                    "gasLimit is required: this client's fee budget reserves the gas limit "
                    "times the most a unit of gas can cost at its speed",
                )
            if self.max_fee_wei is not None and spend.fee > self.max_fee_wei:
                raise PolicyRefused(
                    "maxFeeWei",
                    f"this transaction may cost up to {spend.fee} wei in fees (its gas limit at "
                    f"{spend.speed}), above this client's {self.max_fee_wei} wei per transaction",
                )

    def view(self) -> dict[str, Any]:
        """The policy as the API and the CLI show it (wei as decimal strings)."""
        return {
            "granted": self.granted,
            "unlimited": self.unlimited,
            "allowedTo": sorted(self.allowed_to),
            "maxValueWei": _str(self.max_value_wei),
            "dailyValueWei": _str(self.daily_value_wei),
            "maxGas": self.max_gas,
            "gaslessValue": self.gasless_value,
            "maxFeeWei": _str(self.max_fee_wei),
            "dailyFeeWei": _str(self.daily_fee_wei),
            "speeds": sorted(self.speeds),
        }


NO_POLICY = SpendPolicy()  # what a new client has: nothing may be spent

# The fields of a policy as the API, the CLI and the audit log name them.
FIELDS = (
    "allowedTo",
    "maxValueWei",
    "dailyValueWei",
    "maxGas",
    "gaslessValue",
    "maxFeeWei",
    "dailyFeeWei",
    "speeds",
)


def apply(client: ApiClient, changes: dict[str, Any], *, granted_by: str) -> None:
    """Set the fields of ``changes`` (keys as in :data:`FIELDS`; None clears a limit, an empty
    list allows any destination) and, if it had none, grant the client its policy. Values are
    checked by the caller."""
    if client.policy_granted_at is None:
        client.policy_granted_at = utcnow()
        client.policy_granted_by = granted_by[:200]
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
    if "maxFeeWei" in changes:
        client.policy_max_fee_wei = _str(changes["maxFeeWei"])
    if "dailyFeeWei" in changes:
        client.policy_daily_fee_wei = _str(changes["dailyFeeWei"])
    if "speeds" in changes:
        client.policy_speeds = sorted(set(changes["speeds"] or ())) or None


def _int(text: str | None) -> int | None:
    return None if text is None else int(text)


def _str(value: int | str | None) -> str | None:
    return None if value is None else str(int(value))


def bucket_of(moment: datetime) -> datetime:
    """The start of the five minutes holding ``moment``."""
    return moment.replace(minute=moment.minute - moment.minute % 5, second=0, microsecond=0)


@dataclass(frozen=True, slots=True, eq=False)  # (compared as themselves: they hold columns)
class Kind:
    """One of a client's daily budgets: its rule, where its reservations are counted, and the
    client's setting."""

    rule: str
    spent: Any  # the ClientSpend column
    budget: Any  # the ApiClient column

    def of(self, policy: SpendPolicy) -> int | None:
        return policy.daily_value_wei if self is VALUE else policy.daily_fee_wei


VALUE = Kind("dailyValueWei", ClientSpend.value_wei, ApiClient.policy_daily_value_wei)
FEE = Kind("dailyFeeWei", ClientSpend.fee_wei, ApiClient.policy_daily_fee_wei)


async def spent_today(
    session: AsyncSession,
    client_id: str,
    now: datetime,
    *,
    latest: bool = False,
    kind: Kind = VALUE,
) -> int:
    """What the client reserved of a ``kind`` in the buckets of the last 24 hours (the bucket
    holding ``now - 24 h`` included: the window errs by at most five minutes, towards
    refusing). ``latest``: a locking read, which sees the latest commits whatever the
    isolation level."""
    query = select(kind.spent).where(
        ClientSpend.client_id == client_id, ClientSpend.bucket >= bucket_of(now - DAY)
    )
    rows = await session.execute(query.with_for_update() if latest else query)
    # Summed here, exactly: wei do not fit a float, and MySQL's DECIMAL stops at 65 digits.
    return sum(int(v) for v in rows.scalars())


async def reserve(
    session: AsyncSession,
    client_id: str,
    policy: SpendPolicy,
    value: int,
    now: datetime,
    *,
    fee: int = 0,
    kinds: tuple[Kind, ...] = (VALUE, FEE),
) -> datetime | None:
    """Reserve ``value`` and ``fee`` against the client's daily budgets (each of ``kinds`` it
    has), or refuse naming the budget. Runs in the caller's transaction (the accept's, or the
    consumer's before it submits); the client stays locked until it commits. Returns the
    bucket reserved in, or None when nothing was."""
    reserved = None
    for kind, amount in ((VALUE, value), (FEE, fee)):
        if kind not in kinds or kind.of(policy) is None or amount == 0:
            continue
        budget = await _lock_budget(session, client_id, kind)
        if budget is None:
            continue
        spent = await spent_today(session, client_id, now, latest=True, kind=kind)
        if spent + amount > budget:
            what = "value" if kind is VALUE else "fees of up to"
            raise PolicyRefused(
                kind.rule,
                f"{what} {amount} wei would take this client's last 24 hours to "
                f"{spent + amount} wei, above its budget of {budget} (spent {spent})",
            )
        reserved = bucket_of(now)
        await _add(session, client_id, reserved, amount, now, kind=kind)
    return reserved


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
    kind: Kind = VALUE,
) -> Lease | None:
    """In its own short transaction: give back ``returning`` (the unspent rest of this
    process's previous lease) and reserve a lease of ``budget // parts`` for a transaction of
    ``value`` and those after it. No lease (amount 0) when it would hold less than two such
    values, or leave less than ``budget // reserve_part`` of the budget unleased: the caller
    then reserves exactly, in its own transaction, which refuses what does not fit. None when
    the client has no budget (any more)."""
    budget = await _lock_budget(session, client_id, kind)
    if returning is not None:
        await _add(session, client_id, *returning, now, giving_back=True, kind=kind)
    if budget is None:
        return None
    spent = await spent_today(session, client_id, now, latest=True, kind=kind)
    size = budget // parts
    bucket = bucket_of(now)
    if size < 2 * value or budget - spent - size < budget // reserve_part:
        return Lease(budget, bucket, 0)
    await _add(session, client_id, bucket, size, now, kind=kind)
    return Lease(budget, bucket, size)


async def give_back(
    session: AsyncSession,
    client_id: str,
    bucket: datetime,
    amount: int,
    now: datetime,
    *,
    kind: Kind = VALUE,
) -> None:
    """Return ``amount`` to the budget (a lease's unspent rest, what a settled fee did not
    cost); a negative ``amount`` adds it (a fee that cost more than was reserved)."""
    await _lock_budget(session, client_id, kind)
    if amount >= 0:
        await _add(session, client_id, bucket, amount, now, giving_back=True, kind=kind)
    else:
        await _add(session, client_id, bucket, -amount, now, kind=kind)


async def _lock_budget(session: AsyncSession, client_id: str, kind: Kind = VALUE) -> int | None:
    """Lock the client's budgets and read one. Every change to a client's reservations writes
    its row first, so they queue here (an UPDATE, which MySQL and SQLite both serialise); the
    budget is read after, as it is now (the caller's policy may be a cached copy)."""
    await session.execute(
        update(ApiClient)
        .where(ApiClient.id == client_id)
        .values(policy_spend_lock=ApiClient.policy_spend_lock + 1)
    )
    return _int(await session.scalar(select(kind.budget).where(ApiClient.id == client_id)))


async def _add(
    session: AsyncSession,
    client_id: str,
    bucket: datetime,
    amount: int,
    now: datetime,
    *,
    giving_back: bool = False,
    kind: Kind = VALUE,
) -> None:
    """Add ``amount`` to the client's ``bucket`` of a ``kind`` (or take it off, ``giving_back``)."""
    # A locking read: the latest commit, whatever the caller read before in its transaction
    # (a plain read under REPEATABLE READ sees the transaction's first snapshot, and writing
    # from it would undo another process's change made since).
    existing = await session.scalar(
        select(kind.spent)
        .where(ClientSpend.client_id == client_id, ClientSpend.bucket == bucket)
        .with_for_update()
    )
    if existing is not None:
        total = int(existing) - amount if giving_back else int(existing) + amount
        await session.execute(
            update(ClientSpend)
            .where(ClientSpend.client_id == client_id, ClientSpend.bucket == bucket)
            .values({kind.spent.key: str(max(0, total))})
        )
    elif not giving_back:  # (a bucket given back to after it was forgotten: nothing to do)
        other = FEE if kind is VALUE else VALUE
        await session.execute(
            insert(ClientSpend).values(
                {
                    "client_id": client_id,
                    "bucket": bucket,
                    kind.spent.key: str(amount),
                    other.spent.key: "0",
                }
            )
        )
        # A new bucket every five minutes at most: the time to forget the old ones.
        await session.execute(
            delete(ClientSpend).where(
                ClientSpend.client_id == client_id, ClientSpend.bucket < bucket_of(now - DAY)
            )
        )


async def over_budget(
    session: AsyncSession, client_id: str, policy: SpendPolicy, now: datetime
) -> list[tuple[Kind, int]]:
    """The consumer's check: the budgets the client's reservations of the last 24 hours are
    above as they are now (true only once an operator lowered one), each with what they hold;
    empty when within every budget (or there is none)."""
    over = []
    for kind in (VALUE, FEE):
        budget = kind.of(policy)
        if budget is None:
            continue
        spent = await spent_today(session, client_id, now, kind=kind)
        if spent > budget:
            over.append((kind, spent))
    return over


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
