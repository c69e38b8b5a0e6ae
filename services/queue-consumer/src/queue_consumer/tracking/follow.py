"""The follower: each relayer's transactions read in a few list calls a second, so that a
transaction's statuses reach Relay within about a second without the executor's webhooks.

Why: the executor sends a webhook for each status of each transaction (four per transaction),
each an HTTP request the API answers and a database batch; in chain mode they were most of
Relay's CPU per confirmed transaction (docs/performance.md, issue 29). Without them a status
reached Relay only through the tracker, which asks about a row once it has not been heard of
for ``tracker_stale_s`` (15 s), one GET each. The executor's list (``GET
/relayers/{id}/transactions?status=``, OZ Relayer v1.6.0 and later) carries a page of a
relayer's transactions of one status per request.

What: the consumer that records a transaction's executor id follows it (in memory, bounded
by ``tracker_follow_capacity``). Every ``tracker_follow_interval_s``, for each relayer with
followed transactions and a closed circuit, the list of each status a followed transaction
can move to is read (confirmed at every read, mined, failed, canceled and expired at every
fifth: at 1 s, 1.8 requests a second per relayer), each from its newest page down to where no
followed one can come after, or ``tracker_follow_max_pages``. The confirmed list is ordered by
confirmation, newest first, the others by creation (_ORDER), and what moved since the last
read is at their head: a followed transaction was created after the oldest followed one, and
once the confirmed list has been read whole, what was confirmed before the newest it showed
(less HEAD_MARGIN) was seen then. A transaction whose status or hash differs from what was
last applied is loaded (one query for all) and moved forward through the consumer's group
commit as the tracker moves it (relay_core.tracking.upstream_change: forward-only
compare-and-sets; events of source ``follower``); a final one is no longer followed. A read
of every list, each read whole, that did not show a followed transaction is news too: it has
not moved, and its row is marked heard of (``last_synced_at`` only, at most every
``tracker_stale_s`` / 2), so that the tracker does not ask about each of them while a
relayer's queue holds them.

On OZ Relayer's Redis store a final status's page is a range of a sorted set; a non-final
status's list is read whole to be paged, which for ``mined`` is every transaction awaiting its
confirmations (OZR:src/repositories/transaction/transaction_redis.rs): hence the fifth read.

What it does not do: it is not what guarantees that a transaction is finished. A transaction
it never sees (a consumer restarted and forgot it, a burst deeper than its pages, more than
its capacity) is the tracker's, as before; so is one that has not moved for
``tracker_follow_max_age_s`` (also the longest a transaction the executor lost, and so lists
nowhere, is kept from the tracker, which then finds it missing). It never sends the executor
anything but reads, and a row it finds already moved (a webhook, the status tier, the
tracker) is left as it is: with webhooks configured as well it costs the list reads and a
load per status they applied.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from queue_consumer.circuit import CircuitOpen
from queue_consumer.pool import Member, Pool
from queue_consumer.tracking import repository
from queue_consumer.transactions import repository as rows
from queue_consumer.transactions.group_commit import GroupCommit
from relay_core.db.models import Transaction, utcnow
from relay_core.executor import ExecutorError, ExecutorTx, parse_time
from relay_core.statuses import TxStatus, is_terminal
from relay_core.tracking import UpstreamView, interpret, upstream_change
from relay_wire.direct import DirectPool

log = logging.getLogger(__name__)

# What a change that moves no status writes that is worth a write (the last sync alone is
# not).
_TOUCHED = frozenset({"hash", "upstream_missing_since"})

# The executor's statuses a followed (unmined) transaction can move to, each listed apart:
# ``confirmed`` at every read, the others at every OTHERS_EVERY-th. They are rarer, each read
# is a request the executor's rate limit counts (OZ Relayer: per API key, 100 a second by
# default, shared with the sends), and OZ Relayer reads a non-final status's list whole to page
# it (``mined``: every transaction awaiting its confirmations).
OTHERS = ("mined", "failed", "canceled", "expired")
OTHERS_EVERY = 5
# What each list is ordered by, newest first (OZ Relayer since v1.4.0: confirmed ones by their
# confirmation, the others by creation; OZR:src/repositories/transaction/transaction_redis.rs
# status_sorted_score). A followed transaction was created, and so confirmed, after the oldest
# followed one was created: a page whose last one is older than that ends the list for it.
_ORDER = {"confirmed": "confirmed_at"}
# The confirmed list is read, after a whole read of it, only down to this long before the
# newest confirmation that read showed: whatever was confirmed earlier was listed then (a
# confirmation is listed within milliseconds of its time; the margin covers the executor's
# instances' clocks), and what the read found of it was applied.
HEAD_MARGIN = timedelta(seconds=2)


@dataclass(slots=True)
class _Read:
    seen: dict[str, dict[str, Any]]  # the followed transactions the lists showed
    whole: bool  # every list read was read down to where no followed one can come after
    every_status: bool  # the other statuses' lists were read too
    newest: datetime | None  # the newest confirmation listed, when the confirmed list was whole


@dataclass(slots=True)
class Followed:
    """A transaction this consumer sent, as last applied."""

    transaction_id: str
    created_at: datetime | None  # the executor's clock
    status: TxStatus
    hash: str | None
    since: float  # monotonic: when it was followed, or last moved
    vouched: float  # monotonic: when its row was last marked heard of


class Follower:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        pool: Pool,
        writes: GroupCommit,
        *,
        direct: DirectPool | None = None,
        interval_s: float,
        page_size: int,
        max_pages: int,
        capacity: int,
        max_age_s: float,
        vouch_every_s: float = 7.5,
    ) -> None:
        """``vouch_every_s``: how often, at most, a followed row is marked heard of (half the
        tracker's stale time: the tracker then leaves it to the follower)."""
        self._sessions = sessions
        self._pool = pool
        self._writes = writes
        self._direct = direct
        self.interval_s = interval_s
        self._page_size = page_size
        self._max_pages = max_pages
        self._capacity = capacity
        self._max_age_s = max_age_s
        self._vouch_every_s = vouch_every_s
        self._followed: dict[str, dict[str, Followed]] = {}  # relayer -> executor id -> it
        self._reads: dict[str, int] = {}  # per relayer
        self._heads: dict[str, datetime] = {}  # per relayer: its newest confirmation seen
        self.counts: Counter[str] = Counter()

    @property
    def following(self) -> int:
        return sum(len(of_relayer) for of_relayer in self._followed.values())

    def follow(self, relayer: str | None, transaction_id: str, answer: ExecutorTx) -> None:
        """Follow the transaction the executor answered ``answer`` for (its id recorded)."""
        view = interpret(answer.raw)
        if view is None or is_terminal(view.status):
            return
        if self.following >= self._capacity:
            self.counts["not_followed"] += 1  # the tracker's, as without the follower
            return
        name = self._pool.member(relayer).id
        now = time.monotonic()  # its row was marked heard of as its answer was recorded
        self._followed.setdefault(name, {})[answer.id] = Followed(
            transaction_id, answer.created_at, view.status, view.hash, now, now
        )

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.run_once()
            except Exception as exc:  # never let the loop die: the tracker still covers all
                log.warning("consumer.follower.failed", extra={"error": str(exc)[:200]})

    async def run_once(self) -> int:
        """One read of every relayer with followed transactions; returns how many moved."""
        busy = [name for name, of_relayer in self._followed.items() if of_relayer]
        moved = await asyncio.gather(*(self._read(name) for name in busy))
        return sum(moved)

    async def _read(self, relayer: str) -> int:
        followed = self._followed[relayer]
        wanted = dict(followed)  # what is followed now; more may come while it reads
        member = self._pool.member(relayer)
        try:
            read = await self._list(member, wanted)
        except CircuitOpen:
            return 0
        except ExecutorError as exc:
            self.counts["list_errors"] += 1
            log.info("consumer.follower.list_error", extra={"relayer": relayer, "error": str(exc)})
            return 0
        changed: list[tuple[str, Followed, UpstreamView]] = []
        for executor_id, item in read.seen.items():
            entry = wanted[executor_id]
            view = interpret(item)
            if view is not None and (view.status, view.hash) != (entry.status, entry.hash):
                changed.append((executor_id, entry, view))
        now = time.monotonic()
        for executor_id, entry in wanted.items():
            if entry.since < now - self._max_age_s:
                followed.pop(executor_id, None)  # unmoved that long: the tracker's
                self.counts["aged_out"] += 1
        loaded = await self._load([entry.transaction_id for _, entry, _ in changed])
        outcomes = await asyncio.gather(
            *(
                self._apply(followed, executor_id, entry, view, loaded)
                for executor_id, entry, view in changed
            )
        )
        # Only a read whose news was all applied moves the confirmed list's head on, and only
        # then is what it did not show marked heard of: what one moved meanwhile (its
        # compare-and-set found the row changed) must be read again.
        if all(outcome is not None for outcome in outcomes):
            if read.newest is not None:
                self._heads[relayer] = max(read.newest, self._heads.get(relayer, read.newest))
            if read.whole and read.every_status:
                await self._vouch(followed, {executor_id for executor_id, _, _ in changed}, now)
        return sum(outcome or 0 for outcome in outcomes)

    async def _list(self, member: Member, wanted: dict[str, Followed]) -> _Read:
        """The followed transactions the executor lists in a status they may have moved to,
        each list from its newest page down to where none can come after (_ORDER,
        HEAD_MARGIN), or ``max_pages``."""
        oldest = min((e.created_at for e in wanted.values() if e.created_at), default=None)
        reads = self._reads[member.id] = self._reads.get(member.id, -1) + 1
        statuses = ("confirmed", *OTHERS) if reads % OTHERS_EVERY == 0 else ("confirmed",)
        head = self._heads.get(member.id)
        read = _Read({}, whole=True, every_status=len(statuses) > 1, newest=None)
        async with member.guard.slot(counted=False):
            for status in statuses:
                cutoff = oldest
                if status == "confirmed" and head is not None:
                    cutoff = max(cutoff or head, head - HEAD_MARGIN)
                whole, newest = await self._pages(member, status, cutoff, wanted, read.seen)
                read.whole = read.whole and whole
                if status == "confirmed" and whole:
                    read.newest = newest
        return read

    async def _pages(
        self,
        member: Member,
        status: str,
        cutoff: datetime | None,
        wanted: dict[str, Followed],
        seen: dict[str, dict[str, Any]],
    ) -> tuple[bool, datetime | None]:
        """One status's list, newest first, into ``seen``: whether it was read down to
        ``cutoff`` (or its end), and its first one's time."""
        key = _ORDER.get(status, "created_at")
        first: datetime | None = None
        for number in range(1, self._max_pages + 1):
            items = await member.client.list_raw(number, self._page_size, status)
            self.counts["pages"] += 1
            for item in items:
                executor_id = item.get("id")
                if executor_id in wanted and str(item.get("status")).lower() == status:
                    seen[executor_id] = item
            if number == 1 and items:
                first = parse_time(items[0].get(key))
            if len(items) < self._page_size:
                return True, first
            last = parse_time(items[-1].get(key))
            if cutoff is not None and last is not None and last < cutoff:
                return True, first
        return False, first

    async def _vouch(self, followed: dict[str, Followed], moving: set[str], now: float) -> None:
        """Mark the rows of what is followed and did not move heard of, so that the tracker
        does not ask the executor about each of them (a relayer's queue can hold them for
        minutes): a whole read of every list they could have moved to did not show them.
        Those that moved are written with their move."""
        due = [
            (executor_id, entry)
            for executor_id, entry in followed.items()
            if executor_id not in moving and entry.vouched < now - self._vouch_every_s
        ]
        if not due:
            return
        await repository.heard_of(
            self._sessions, self._direct, [entry.transaction_id for _, entry in due], utcnow()
        )
        for _, entry in due:
            entry.vouched = now
        self.counts["vouched"] += len(due)

    async def _load(self, transaction_ids: list[str]) -> dict[str, Transaction]:
        if not transaction_ids:
            return {}
        if self._direct is not None:
            return await rows.load_many_direct(self._direct, transaction_ids)
        async with self._sessions() as session:
            return await rows.load_many(session, transaction_ids)

    async def _apply(
        self,
        followed: dict[str, Followed],
        executor_id: str,
        entry: Followed,
        view: UpstreamView,
        loaded: dict[str, Transaction],
    ) -> int | None:
        """1 if the row moved, 0 if it did not need to, None if it moved meanwhile."""
        tx = loaded.get(entry.transaction_id)
        if tx is None or tx.executor_tx_id != executor_id or is_terminal(tx.status):
            followed.pop(executor_id, None)  # finished, or no longer this executor id's row
            return 0
        change = upstream_change(tx, view, source="follower")
        if change is None:
            followed.pop(executor_id, None)
            return 0
        moved = 0
        if change.status != tx.status or _TOUCHED & change.values.keys():
            if not await self._writes.write(change):
                return None  # it moved meanwhile: read again, decided from a fresh row
            moved = 1
            self.counts["moved"] += 1
        # else the row is there already (a webhook, the status tier): nothing to write
        entry.status, entry.hash, entry.since = view.status, view.hash, time.monotonic()
        if is_terminal(view.status):
            followed.pop(executor_id, None)
        return moved
