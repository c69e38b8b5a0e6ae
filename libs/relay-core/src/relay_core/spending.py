"""A client's daily budgets (``dailyValueWei``, ``dailyFeeWei``, relay_core.policy): the
reservations counted against them in ``client_spend``, in buckets of five minutes, and the
leases one API process spends from memory.

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

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from relay_core.db.models import ApiClient, ClientSpend
from relay_core.policy import PolicyRefused, SpendPolicy

BUCKET = timedelta(minutes=5)
DAY = timedelta(hours=24)


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
    budget = await session.scalar(select(kind.budget).where(ApiClient.id == client_id))
    return None if budget is None else int(budget)


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
