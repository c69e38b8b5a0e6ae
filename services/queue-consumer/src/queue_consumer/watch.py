"""The pool's watch: every few seconds, what each relayer holds, whether an operator paused
it, whether it is jammed; every half minute, its balance. Its verdicts set each relayer's state
(relay_core.pool) and are written for the pool view.

**Jammed.** A relayer whose oldest ``submitted`` transaction has not been mined for
``relayer_jam_after_s``, or (with a chain to read) while ``relayer_jam_after_blocks`` blocks
were made since the watch first saw it oldest, is jammed: a nonce stuck at the executor (OZ
Relayer issues #818, #843), a fee the market has left behind, an executor that accepts and
never broadcasts. Counting from the oldest one also covers a relayer whose count grows while
nothing is mined: its first stuck transaction ages like any other. Relay's rows only suggest it
(they follow the executor's webhooks and the tracker, which may be behind: during an executor
outage the tracker waits); the executor decides: the oldest one is asked for, and only if the
executor still has it unmined (pending, sent, submitted), and the relayer has confirmed nothing
else within the limit either (when the executor says, ``last_confirmed_transaction_timestamp``:
a relayer with a long queue is busy, not jammed), is the relayer jammed. No answer: no verdict,
the relayer keeps the state it had. It takes no new work; what it holds stays with it (sending
it again elsewhere could execute it twice); it is ``ok`` again as soon as its oldest submitted
transaction is younger than the limit, that is once it mines again. An operator cancels or
replaces the stuck transaction at the executor (docs/runbook.md).

**Low.** A relayer whose balance (the executor's ``GET /relayers/{id}/status``) is below its
floor takes no new work until it is funded; a balance that cannot be read keeps the last one.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from queue_consumer import metrics
from queue_consumer.circuit import CircuitOpen
from queue_consumer.pool import Member, Pool
from queue_consumer.settings import ConsumerSettings
from relay_core import evm
from relay_core import pool as pool_state
from relay_core.db.models import utcnow
from relay_core.executor import ExecutorError, parse_time
from relay_core.pool import Held, RelayerState
from relay_core.tracking import UNMINED

log = logging.getLogger(__name__)


class Watch:
    def __init__(
        self,
        pool: Pool,
        sessions: async_sessionmaker[AsyncSession],
        settings: ConsumerSettings,
        rpc: evm.EvmRpc | None = None,
    ) -> None:
        self.pool = pool
        self.sessions = sessions
        self.consumer_id = settings.consumer_id
        self.jam_after = timedelta(seconds=settings.relayer_jam_after_s)
        self.jam_after_blocks = settings.relayer_jam_after_blocks if rpc is not None else 0
        self.rpc = rpc
        # Per relayer: its oldest submitted transaction's time, and the chain's head when the
        # watch first saw that one oldest (the blocks it has waited are counted from there).
        self.oldest_since: dict[str, tuple[datetime, int, datetime]] = {}
        self.interval_s = settings.relayer_watch_interval_s
        self.balance_interval_s = settings.relayer_balance_interval_s
        self.timeout_s = settings.executor_timeout_s
        self.balance_at: dict[str, datetime] = {}
        metrics.watch_pool(pool)

    async def run(self) -> None:
        await asyncio.gather(self._looking(), self._reading_balances())

    async def _looking(self) -> None:
        while True:
            try:
                await self.look()
            except Exception as exc:
                log.warning("consumer.relayers.watch_failed", extra={"error": str(exc)[:200]})
            await asyncio.sleep(self.interval_s)

    async def _reading_balances(self) -> None:
        while True:
            await asyncio.gather(*(self.read_balance(m) for m in self.pool.members.values()))
            await asyncio.sleep(self.balance_interval_s)

    async def look(self) -> None:
        """One pass: count, judge, report."""
        async with self.sessions() as session:
            held = await pool_state.held(session, self.pool.default)
            paused = await pool_state.paused(session)
        now = utcnow()
        head = await self._head()
        for member in self.pool.members.values():
            member.held = held.get(member.id, Held())
            member.routed = 0
            waited = self.blocks_waited(member, head, now)
            health, detail = self.verdict(member, now, paused, waited)
            if health is RelayerState.jammed:
                health, detail = await self.confirm_jam(
                    member, detail, now, self.moving_since(member, now)
                )
            before = member.health
            if self.pool.set_health(member, health, detail):
                self._changed(member, before, now)
        reports = [
            pool_state.Report(
                relayer=m.id,
                state=m.state.value,
                detail=m.detail or None,
                held=m.held,
                balance_wei=m.balance_wei,
                balance_at=self.balance_at.get(m.id),
                last_mined_at=m.last_mined_at,
            )
            for m in self.pool.members.values()
        ]
        async with self.sessions() as session, session.begin():
            await pool_state.write_reports(session, reports, self.consumer_id)

    async def _head(self) -> int | None:
        if not self.jam_after_blocks or self.rpc is None:
            return None
        try:
            async with asyncio.timeout(self.timeout_s):
                return await self.rpc.block_number()
        except (evm.RpcError, evm.RpcUnavailable, TimeoutError) as exc:
            log.info("consumer.relayers.head_unread", extra={"error": str(exc)[:200]})
            return None  # the seconds alone this pass

    def blocks_waited(self, member: Member, head: int | None, now: datetime) -> int | None:
        oldest = member.held.oldest
        if oldest is None:
            self.oldest_since.pop(member.id, None)
            return None
        if head is None:
            return None
        seen = self.oldest_since.get(member.id)
        if seen is None or seen[0] != oldest:
            self.oldest_since[member.id] = seen = (oldest, head, now)
        return head - seen[1]

    def moving_since(self, member: Member, now: datetime) -> datetime:
        """After when a transaction mined shows the relayer moving: within the seconds limit;
        or, when the blocks limit alone called it jammed, since its oldest became oldest."""
        oldest = member.held.oldest
        seen = self.oldest_since.get(member.id)
        if (oldest is not None and now - oldest > self.jam_after) or seen is None:
            return now - self.jam_after
        return seen[2]

    def verdict(
        self, member: Member, now: datetime, paused: set[str], blocks_waited: int | None = None
    ) -> tuple[RelayerState, str]:
        if member.id in paused:
            return RelayerState.paused, "paused by an operator"
        oldest = member.held.oldest
        if oldest is not None and now - oldest > self.jam_after:
            return RelayerState.jammed, (
                f"{member.held.count} submitted, the oldest for "
                f"{(now - oldest).total_seconds():.0f} s without being mined"
            )
        waited = blocks_waited if self.jam_after_blocks else None
        if waited is not None and waited >= self.jam_after_blocks:
            return RelayerState.jammed, (
                f"{member.held.count} submitted, the oldest unmined for {waited} blocks"
            )
        floor = member.spec.min_balance_wei
        if floor and member.balance_wei is not None and member.balance_wei < floor:
            return RelayerState.low, f"balance {member.balance_wei} wei, below {floor}"
        return RelayerState.ok, ""

    async def confirm_jam(
        self, member: Member, detail: str, now: datetime, moving_since: datetime | None = None
    ) -> tuple[RelayerState, str]:
        """Ask the executor whether the relayer's oldest submitted transaction is still not
        mined (see the module's doc)."""
        async with self.sessions() as session:
            oldest = await pool_state.oldest_submitted(session, member.id, self.pool.default)
        if oldest is None:
            return RelayerState.ok, ""
        try:
            async with asyncio.timeout(self.timeout_s), member.guard.slot(counted=False):
                upstream = await member.client.get(oldest)
        except (CircuitOpen, ExecutorError, TimeoutError):
            return member.health, member.detail  # no verdict
        if upstream.status not in UNMINED:
            return RelayerState.ok, ""  # mined: Relay's row is behind, the tracker follows
        mined = member.last_mined_at
        if mined is not None and mined > (moving_since or now - self.jam_after):
            return RelayerState.ok, ""  # busy with a long queue, and mining
        return RelayerState.jammed, f"{detail} (the executor has it {upstream.status})"

    def _changed(self, member: Member, before: RelayerState, now: datetime) -> None:
        extra = {
            "relayer": member.id,
            "state": member.health.value,
            "before": before.value,
            "detail": member.detail,
            "submitted": member.held.count,
        }
        if member.health is RelayerState.ok:
            log.warning("consumer.relayer.recovered", extra=extra)
        else:
            # consumer.relayer.jammed / .low / .paused: infra/ alarms on the first two
            log.error(f"consumer.relayer.{member.health.value}", extra=extra)
            metrics.RELAYER_TROUBLE.inc(member.id, member.health.value)

    async def read_balance(self, member: Member) -> None:
        try:
            async with asyncio.timeout(self.timeout_s):
                status = await member.guard.within_limit(member.client.status())
            member.balance_wei = int(status["balance"])
            self.balance_at[member.id] = utcnow()
            mined = status.get("last_confirmed_transaction_timestamp")
            if mined:
                member.last_mined_at = parse_time(mined)
        except Exception as exc:  # keep the last balance; the circuit judges the executor
            log.info(
                "consumer.relayer.balance_unread",
                extra={"relayer": member.id, "error": str(exc)[:200]},
            )
