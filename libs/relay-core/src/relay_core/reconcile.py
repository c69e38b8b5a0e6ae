"""The reconciler: settles rows that no other loop would look at again.

Every non-final state has a watcher (docs/runbook.md). Two of them are here, because the others
cannot see them:

* **A pending row whose message is gone.** It was enqueued (``enqueued_at`` set) longer than
  ``reconcile_pending_after_s`` ago and no consumer has claimed it since: its message was lost
  (an SQS server that lost its state, a purge, retention) or dead-lettered by the redrive policy
  (consumers could not act on it: killed on its last receive, or dying on it every time). It
  is enqueued again (a duplicate message is harmless: claims are compare-and-set), also the
  first time its message is found in the dead-letter queue. The second time (``dead_letters``
  counts them) a row that was never sent to the executor is failed with a ``dead_lettered``
  reason and a gasless sender's in-flight nonce is released; the message stays in the DLQ for
  an operator. A row an earlier attempt may have sent (in doubt) is never failed here.
* **A row whose queue is younger than its message.** When a queue's ``CreatedTimestamp``
  moves on between two looks (the queue was deleted and made again, an SQS server restarted
  empty), the new queue cannot hold a message sent before it existed. The rows that still
  need one (pending, or processing with no claim and nothing at the executor yet) and were
  enqueued before it are enqueued again at once, not after ``reconcile_pending_after_s``. The
  consumer looks at its start (a queue seen for the first time counts: it may have come up
  after the server came back empty) and as soon as its receives work again after failing;
  ``relay reconcile --once`` leaves a queue it sees for the first time to the pending rule.
* **A submitted row the executor has lost.** The tracker marks a row whose executor record
  answers 404 (``upstream_missing_since``). Once that is ``reconcile_missing_after_s`` old, the
  reconciler asks its relayer once more (no answer: next pass; found again: the mark is
  cleared), then, with an RPC URL, the chain: a receipt settles it as ``confirmed`` or
  ``failed`` by its status. Otherwise it is failed with the reason and an error is logged: its
  hash (if any) must be checked on chain by hand.

It runs as a loop in every consumer process and as ``relay reconcile --once``, several at once
if need be: every change is a compare-and-set, so a row is settled once."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from relay_core import dlq, evm
from relay_core.cache import StatusCache
from relay_core.db.models import Transaction, utcnow
from relay_core.db.transitions import touch, transition
from relay_core.executor import ErrorKind, ExecutorError
from relay_core.queue import TransactionMessage, send_batch
from relay_core.relayers import ExecutorPool
from relay_core.settings import InfraSettings
from relay_core.statuses import TxStatus
from relay_core.tracking import apply_upstream, interpret

log = logging.getLogger(__name__)

SOURCE = "reconciler"
# The pipeline counts dead-lettered transactions by this event source.
SOURCE_DLQ = "consumer.dlq"


@dataclass
class Report:
    requeued: int = 0
    dead_lettered: int = 0
    lost_upstream: int = 0
    examined: int = 0
    notes: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "requeued": self.requeued,
            "deadLettered": self.dead_lettered,
            "lostUpstream": self.lost_upstream,
            "examined": self.examined,
        }


class Reconciler:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        sqs: Any,
        lanes: Mapping[str, tuple[str, str]],
        settings: InfraSettings,
        cache: StatusCache | None = None,
        *,
        executors: ExecutorPool | None = None,
        rpc: evm.EvmRpc | None = None,
    ) -> None:
        self._sessions = sessions
        self._sqs = sqs
        self._lanes = dict(lanes)  # lane -> (queue URL, DLQ URL)
        self._pending_after = timedelta(seconds=settings.reconcile_pending_after_s)
        self._missing_after = timedelta(seconds=settings.reconcile_missing_after_s)
        self._batch = settings.reconcile_batch
        self._cache = cache
        self._executors = executors
        self._rpc = rpc
        self._queue_created: dict[str, datetime] = {}  # per lane, as last seen

    async def run_once(self) -> Report:
        report = Report()
        await self._older_than_their_queue(report, first_look=False)
        await self._stranded_pending(report)
        await self._lost_upstream(report)
        if report.requeued or report.dead_lettered or report.lost_upstream:
            log.warning("reconcile.settled", extra=report.summary())
        return report

    async def requeue_lost(self) -> Report:
        """Only the rows whose queue is younger than their message (see the module)."""
        report = Report()
        await self._older_than_their_queue(report, first_look=True)
        if report.requeued:
            log.warning("reconcile.settled", extra=report.summary())
        return report

    # --- rows whose queue was made after their message ----------------------------------------

    async def _older_than_their_queue(self, report: Report, *, first_look: bool) -> None:
        """``first_look``: a queue not seen before counts too (run_once only records it)."""
        for lane, (queue_url, _) in self._lanes.items():
            created = await self._created(queue_url)
            if created is None:
                continue
            known = self._queue_created.get(lane)
            self._queue_created[lane] = created
            if (known is None and not first_look) or (known is not None and created <= known):
                continue
            if known is not None:  # (a first look at a queue older than every row finds none)
                made = {"lane": lane, "queueCreated": str(created)}
                log.warning("reconcile.queue_made_again", extra=made)
            while True:
                async with self._sessions() as session:
                    # SQS gives the creation time in whole seconds, rounded down: a message
                    # sent in that second but before the queue existed could not be sent at
                    # all (it went back to the outbox), so "before that second" is enough.
                    rows = await _enqueued_before(session, lane, created, self._batch)
                report.examined += len(rows)
                to_send = [
                    tx for tx in rows if await self._write(tx, tx.status, enqueued_at=utcnow())
                ]
                await self._send(to_send, report)
                if len(rows) < self._batch or not to_send:
                    break

    async def _created(self, queue_url: str) -> datetime | None:
        try:
            answer = await self._sqs.get_queue_attributes(
                QueueUrl=queue_url, AttributeNames=["CreatedTimestamp"]
            )
            seconds = int(answer["Attributes"]["CreatedTimestamp"])
        except Exception as exc:  # SQS not answering (or not saying): nothing to learn now
            log.info("reconcile.queue_unreadable", extra={"error": str(exc)[:200]})
            return None
        return datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None)

    # --- pending rows without a message ------------------------------------------------------

    async def _stranded_pending(self, report: Report) -> None:
        cutoff = utcnow() - self._pending_after
        async with self._sessions() as session:
            rows = await _stranded(session, cutoff, self._batch)
        if not rows:
            return
        report.examined += len(rows)
        in_dlq = await self._dead_letters({tx.id for tx in rows})
        to_send: list[Transaction] = []
        for tx in rows:
            reason = in_dlq.get(tx.id)
            if reason is not None and tx.submit_started_at is None and tx.dead_letters >= 1:
                await self._dead_lettered(tx, reason, report)
                continue
            # Lost, dead-lettered once, or in doubt (an earlier submit may have reached the
            # executor: never failed here): a fresh message lets a consumer decide.
            again = {"dead_letters": tx.dead_letters + 1} if reason is not None else {}
            if await self._write(tx, tx.status, enqueued_at=utcnow(), **again):
                to_send.append(tx)
        await self._send(to_send, report)

    async def _dead_lettered(self, tx: Transaction, reason: str, report: Report) -> None:
        text = f"dead_lettered: {reason}; never sent to the executor"
        if await self._write(
            tx, TxStatus.failed, reason=text, source=SOURCE_DLQ, error=text, inflight_key=None
        ):
            report.dead_lettered += 1
            log.error("reconcile.dead_lettered", extra={"transactionId": tx.id, "why": reason})

    async def _send(self, rows: Sequence[Transaction], report: Report) -> None:
        by_lane: dict[str, list[Transaction]] = {}
        for tx in rows:
            lane = tx.lane if tx.lane in self._lanes else "normal"
            by_lane.setdefault(lane, []).append(tx)
        for lane, some in by_lane.items():
            await self._send_lane(lane, some, report)

    async def _send_lane(self, lane: str, rows: Sequence[Transaction], report: Report) -> None:
        queue_url = self._lanes[lane][0]
        for start in range(0, len(rows), 10):
            chunk = rows[start : start + 10]
            messages = [TransactionMessage.new(tx.id, tx.type, lane=lane) for tx in chunk]
            try:
                sent = await send_batch(self._sqs, queue_url, messages)
            except Exception as exc:
                sent = set()
                report.notes.append(f"send failed: {exc}")
            for tx in chunk:
                if tx.id in sent:
                    report.requeued += 1
                    log.warning("reconcile.requeued", extra={"transactionId": tx.id})
                else:
                    # Back to the outbox: the API's sweeper sends it once SQS answers.
                    await self._write(tx, tx.status, enqueued_at=None)

    async def _dead_letters(self, wanted: set[str]) -> dict[str, str]:
        """Which of ``wanted`` have a message in the DLQ, with the reason it carries. Reads
        the DLQ (hiding what it read for a moment), then makes it all visible again."""
        found: dict[str, str] = {}

        def note(letter: dlq.DeadLetter) -> bool:
            for transaction_id in letter.transaction_ids:  # a packed message's each
                if transaction_id in wanted:
                    found[transaction_id] = (
                        letter.reason or "moved to the DLQ by the redrive policy"
                    )
            return len(found) == len(wanted)

        for _, dlq_url in self._lanes.values():
            letters: list[dlq.DeadLetter] = []
            try:
                letters = await dlq.read(self._sqs, dlq_url, enough=note)
            finally:
                await dlq.reveal(self._sqs, dlq_url, letters)
            if len(found) == len(wanted):
                break
        return found

    # --- rows the executor has lost ----------------------------------------------------------

    async def _lost_upstream(self, report: Report) -> None:
        cutoff = utcnow() - self._missing_after
        async with self._sessions() as session:
            rows = await _missing_upstream(session, cutoff, self._batch)
        report.examined += len(rows)
        for tx in rows:
            if await self._still_known(tx):
                continue
            if await self._settled_on_chain(tx, report):
                continue
            since = tx.upstream_missing_since
            text = (
                f"the executor lost this transaction: its record {tx.executor_tx_id} has been "
                f"missing since {since:%Y-%m-%d %H:%M:%S} UTC"
                + (f"; check hash {tx.hash} on chain" if tx.hash else "; it had no hash yet")
            )
            if await self._write(tx, TxStatus.failed, reason=text, error=text, inflight_key=None):
                report.lost_upstream += 1
                log.error(
                    "reconcile.executor_lost",
                    extra={
                        "transactionId": tx.id,
                        "executorTxId": tx.executor_tx_id,
                        "hash": tx.hash,
                        "missingSince": str(since),
                    },
                )

    async def _still_known(self, tx: Transaction) -> bool:
        """Ask the executor once more before giving up: True if it answers anything but 404
        (found again: the mark is cleared; no answer: the row waits for the next pass)."""
        if self._executors is None or tx.executor_tx_id is None:
            return False
        try:  # at the relayer it was sent to
            upstream = await self._executors.of(tx.relayer).get(tx.executor_tx_id)
        except ExecutorError as exc:
            return exc.kind is not ErrorKind.not_found
        view = interpret(upstream.raw)
        async with self._sessions() as session, session.begin():
            if view is None:
                written = await touch(
                    session, tx, upstream_missing_since=None, last_synced_at=utcnow()
                )
            else:
                written = await apply_upstream(session, tx, view, source=SOURCE)
        if written and self._cache is not None:
            await self._cache.put_row_quietly(tx)
        return True

    async def _settled_on_chain(self, tx: Transaction, report: Report) -> bool:
        """With an RPC URL and a hash, the chain says what became of it."""
        if self._rpc is None or not tx.hash:
            return False
        try:
            receipt = await self._rpc.receipt(tx.hash)
        except (evm.RpcError, evm.RpcUnavailable):
            return True  # cannot tell now: next pass
        if receipt is None:
            return False
        succeeded = int(str(receipt.get("status", "0x0")), 16) == 1
        block = int(str(receipt.get("blockNumber", "0x0")), 16)
        status = TxStatus.confirmed if succeeded else TxStatus.failed
        text = f"the executor lost its record; the chain has it in block {block}" + (
            "" if succeeded else ", reverted"
        )
        values: dict[str, Any] = {"inflight_key": None, "upstream_missing_since": None}
        if succeeded:
            values["confirmed_at"] = utcnow()
        else:
            values["error"] = text
        if await self._write(tx, status, reason=text, **values):
            report.lost_upstream += 1
            log.warning(
                "reconcile.settled_on_chain",
                extra={"transactionId": tx.id, "hash": tx.hash, "status": status.value},
            )
        return True

    # --- writes -------------------------------------------------------------------------------

    async def _write(
        self,
        tx: Transaction,
        status: str,
        *,
        reason: str | None = None,
        source: str = SOURCE,
        **values: Any,
    ) -> bool:
        async with self._sessions() as session, session.begin():
            if status == tx.status:
                written = await touch(session, tx, **values)
            else:
                written = await transition(
                    session, tx, status, source=source, reason=reason, **values
                )
        if written and self._cache is not None:
            await self._cache.put_row_quietly(tx)
        return written


async def _stranded(session: AsyncSession, enqueued_before: datetime, limit: int) -> list[Any]:
    rows = await session.execute(
        select(Transaction)
        .where(
            Transaction.status == TxStatus.pending.value,
            Transaction.enqueued_at.is_not(None),
            Transaction.enqueued_at < enqueued_before,
        )
        .order_by(Transaction.enqueued_at)
        .limit(limit)
    )
    found = list(rows.scalars())
    session.expunge_all()
    return found


async def _enqueued_before(
    session: AsyncSession, lane: str, before: datetime, limit: int
) -> list[Any]:
    """Rows of ``lane`` that still need their message and were enqueued before ``before``."""
    waiting = (Transaction.status == TxStatus.pending.value) | (
        (Transaction.status == TxStatus.processing.value) & Transaction.claimed_by.is_(None)
    )
    rows = await session.execute(
        select(Transaction)
        .where(
            Transaction.status.in_([TxStatus.pending.value, TxStatus.processing.value]),
            waiting,
            Transaction.lane == lane,
            Transaction.executor_tx_id.is_(None),
            Transaction.enqueued_at.is_not(None),
            Transaction.enqueued_at < before,
        )
        .order_by(Transaction.enqueued_at)
        .limit(limit)
    )
    found = list(rows.scalars())
    session.expunge_all()
    return found


async def _missing_upstream(session: AsyncSession, since_before: datetime, limit: int) -> list[Any]:
    rows = await session.execute(
        select(Transaction)
        .where(
            Transaction.upstream_missing_since.is_not(None),
            Transaction.upstream_missing_since < since_before,
            Transaction.status.in_([TxStatus.submitted.value, TxStatus.mined.value]),
        )
        .order_by(Transaction.upstream_missing_since)
        .limit(limit)
    )
    found = list(rows.scalars())
    session.expunge_all()
    return found
