"""One unit of work per message: reload the row, decide from it, claim it, execute it once.

The exactly-once argument, step by step:

1. A claim is a compare-and-set on the row's version, so two deliveries of the same message
   cannot both proceed.
2. The claim also stamps ``submit_started_at`` and is committed *before* the executor call.
   The executor's id is recorded (with status ``submitted``) right after it answers.
3. A later attempt that finds ``submit_started_at`` set and no executor id is *in doubt*: the
   earlier call may or may not have reached the executor. It lists the executor's
   transactions created since that stamp and adopts a match (to, data, value) not already
   recorded against another row. It resubmits only once the earlier call can no longer be
   acted upon and the list shows nothing. "Can no longer" is bounded: an attempt never starts
   its executor call later than ``consumer_submit_budget_s`` after its stamp, the whole call
   (pool, connect, send, answer) is cut off after ``executor_timeout_s``, and the executor
   stops acting on a request after ``executor_handler_timeout_s``. Should those bounds ever be
   broken anyway, the late duplicate is detected when it answers and canceled at the executor.
4. Two holders of the same message (its visibility lapsed while the first was still working)
   do not both proceed: an active claim by the same message makes the second one wait.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from queue_consumer.retry import Failure
from queue_consumer.settings import ConsumerSettings
from queue_consumer.transactions import repository
from queue_consumer.transactions.group_commit import GroupCommit
from relay_core import ethereum
from relay_core.db.models import Transaction, utcnow
from relay_core.db.transitions import Change
from relay_core.executor import ErrorKind, ExecutorClient, ExecutorError, ExecutorTx
from relay_core.statuses import TxStatus, TxType, is_terminal

log = logging.getLogger(__name__)

SOURCE = "consumer"
SOURCE_DLQ = "consumer.dlq"  # the pipeline counts dead-lettered transactions by this source

# Executors' clocks and ours differ a little; look a bit further back than the stamp.
_CLOCK_SKEW = timedelta(seconds=5)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one attempt achieved. ``failure`` None means the message is finished."""

    failure: Failure | None = None
    reason: str = ""
    retry_after_s: float | None = None
    action: str = "done"

    @classmethod
    def done(cls, action: str) -> Outcome:
        return cls(action=action)


class TransactionProcessor:
    def __init__(
        self,
        settings: ConsumerSettings,
        sessions: async_sessionmaker[AsyncSession],
        executor: ExecutorClient,
        writes: GroupCommit,
    ) -> None:
        self.settings = settings
        self.sessions = sessions
        self.executor = executor
        self.writes = writes
        self.consumer_id = settings.consumer_id
        self._active_claim = timedelta(seconds=settings.queue_visibility_timeout_s * 0.9)
        self._submit_budget = timedelta(seconds=settings.consumer_submit_budget_s)
        self._settle = self._submit_budget + timedelta(
            seconds=settings.executor_timeout_s + settings.executor_handler_timeout_s + 1
        )
        self._fault = os.environ.get("RELAY_CONSUMER_FAULT", "") if settings.is_dev else ""

    # --- the unit of work -------------------------------------------------------------------

    def owner(self, message_id: str) -> str:
        """Claims are owned by a message (and say which process holds it): a redelivery of the
        same message may take its own claim over, a different copy of it may not."""
        return f"{message_id}@{self.consumer_id}"[:64]

    async def load_many(self, transaction_ids: list[str]) -> dict[str, Transaction]:
        """Snapshots of a receive batch's rows in one query (``process`` takes them)."""
        if not transaction_ids:
            return {}
        async with self.sessions() as session:
            return await repository.load_many(session, transaction_ids)

    async def process(
        self,
        transaction_id: str,
        message_id: str,
        *,
        last_receive: bool,
        snapshot: Transaction | None = None,
    ) -> Outcome:
        """``snapshot``: the row as read moments ago with its batch; every write is a
        compare-and-set on its version, so a row changed since is decided afresh."""
        tx = snapshot
        if tx is None:
            async with self.sessions() as session:
                tx = await repository.load(session, transaction_id)
        if tx is None:
            return Outcome(Failure.poison, "no transaction with this id", action="unknown")
        if is_terminal(tx.status) or tx.status in (TxStatus.submitted, TxStatus.mined):
            return Outcome.done("already_done")
        now = utcnow()
        owner = self.owner(message_id)
        if (
            tx.status == TxStatus.processing
            and tx.claimed_by is not None
            and tx.claimed_at is not None
            and now - tx.claimed_at < self._active_claim
        ):
            if tx.claimed_by.split("@", 1)[0] == message_id and not last_receive:
                # This very message is still being worked on elsewhere (its visibility
                # lapsed): wait for that attempt rather than race it. (On the last receive
                # the message is let go instead of dead-lettered: the holder finishes the
                # row, and the reaper backs it up if it cannot.)
                remaining = (tx.claimed_at + self._active_claim - now).total_seconds()
                return Outcome(
                    Failure.transient,
                    "still being processed by another consumer",
                    retry_after_s=remaining,
                    action="busy_elsewhere",
                )
            # Another copy of the message is being worked on right now; it holds its own
            # message, which will be deleted or retried on its own.
            return Outcome.done("duplicate")

        previous_start = tx.submit_started_at if tx.executor_tx_id is None else None
        if previous_start is None and tx.valid_until is not None and tx.valid_until <= now:
            await self._finish(
                tx, TxStatus.expired, "validUntil passed before submission", inflight_key=None
            )
            return Outcome.done("expired")

        claimed = await self._write(
            tx,
            TxStatus.processing,
            attempts=tx.attempts + 1,
            claimed_by=owner,
            claimed_at=now,
            submit_started_at=previous_start or now,
        )
        if not claimed:
            return await self._lost_claim(transaction_id, last_receive)
        log.debug(
            "consumer.claimed",
            extra={
                "transactionId": tx.id,
                "owner": owner,
                "stamp": str(tx.submit_started_at),
                "inDoubtSince": str(previous_start),
            },
        )

        if previous_start is not None:
            return await self._resolve_in_doubt(
                tx, previous_start, owner, last_receive=last_receive
            )
        return await self._submit(tx, owner, last_receive=last_receive)

    async def _submit(self, tx: Transaction, owner: str, *, last_receive: bool) -> Outcome:
        started = tx.submit_started_at
        if started is None or utcnow() - started > self._submit_budget:
            # Too late to call the executor under this stamp: the in-doubt rule assumes the
            # call starts within the budget. Nothing was sent, so the stamp is withdrawn (the
            # version check makes sure it is still ours) and the retry is a plain submit.
            await self._write(tx, tx.status, submit_started_at=None, claimed_by=None)
            return Outcome(Failure.transient, "submit budget exceeded", action="late_submit")
        log.debug(
            "consumer.submit.started",
            extra={"transactionId": tx.id, "owner": owner, "stamp": str(started)},
        )
        try:
            # One deadline for the whole call, so the in-doubt window has a known end.
            async with asyncio.timeout(self.settings.executor_timeout_s):
                result = await self.executor.submit(self.executor_payload(tx))
        except TimeoutError:
            exc = ExecutorError(ErrorKind.timeout, "executor did not answer in time")
            return await self._after_failed_submit(tx, exc, owner, last_receive=last_receive)
        except ExecutorError as exc:
            return await self._after_failed_submit(tx, exc, owner, last_receive=last_receive)
        log.debug(
            "consumer.submit.answered",
            extra={"transactionId": tx.id, "owner": owner, "executorTxId": result.id},
        )
        if self._fault == "exit-after-submit":
            os._exit(70)  # fault injection for the crash tests: die before recording
        await self._record_submitted(tx, result)
        return Outcome.done("submitted")

    async def _after_failed_submit(
        self, tx: Transaction, exc: ExecutorError, owner: str, *, last_receive: bool
    ) -> Outcome:
        if exc.kind is ErrorKind.rejected:
            await self._finish(
                tx,
                TxStatus.failed,
                f"executor rejected the transaction: {exc.message}",
                source=SOURCE_DLQ,
                inflight_key=None,
                claimed_by=None,
            )
            return Outcome(Failure.permanent, str(exc), action="rejected")
        if exc.certain_not_created:
            # Nothing reached the executor: forget the stamp so the retry is a plain submit.
            await self._write(tx, tx.status, submit_started_at=None, claimed_by=None)
            if last_receive:
                return await self._give_up(tx, str(exc))
            failure = (
                Failure.rate_limited if exc.kind is ErrorKind.rate_limited else Failure.transient
            )
            return Outcome(failure, str(exc), retry_after_s=exc.retry_after_s, action="retry")
        # In doubt: the executor may have it. The stamp stays; the next attempt looks it up.
        if last_receive:
            return await self._resolve_in_doubt(tx, tx.submit_started_at, owner, last_receive=True)
        await self._write(tx, tx.status, claimed_by=None)
        return Outcome(Failure.transient, f"in doubt: {exc}", action="retry_in_doubt")

    async def _resolve_in_doubt(
        self, tx: Transaction, started: datetime | None, owner: str, *, last_receive: bool
    ) -> Outcome:
        assert started is not None
        settled_at = started + self._settle
        wait_s = (settled_at - utcnow()).total_seconds()
        if wait_s > 0 and not last_receive:
            found = await self._find_at_executor(tx, started)
            if found is not None:
                await self._record_submitted(tx, found)
                return Outcome.done("adopted")
            await self._write(tx, tx.status, claimed_by=None)
            return Outcome(
                Failure.transient,
                "earlier submit in doubt; waiting for it to settle",
                retry_after_s=wait_s,
                action="wait_settle",
            )
        if wait_s > 0:
            await asyncio.sleep(wait_s)  # last chance: wait here rather than lose the message
        found = await self._find_at_executor(tx, started)
        log.debug(
            "consumer.in_doubt.looked_up",
            extra={"transactionId": tx.id, "stamp": str(started), "found": found and found.id},
        )
        if found is not None:
            await self._record_submitted(tx, found)
            return Outcome.done("adopted")
        retention_guard = timedelta(seconds=self.settings.executor_retention_s * 0.75)
        if utcnow() - started > retention_guard:
            # The executor may already have deleted a finished record: resubmitting could
            # execute twice, so stop and ask a human.
            await self._finish(
                tx,
                TxStatus.failed,
                "earlier submit in doubt beyond the executor's retention; check manually",
                source=SOURCE_DLQ,
                claimed_by=None,
            )
            return Outcome(Failure.permanent, "in doubt beyond retention", action="in_doubt_failed")
        # Certain now: the executor does not have it. Submit afresh.
        if not await self._write(tx, tx.status, submit_started_at=utcnow(), claimed_by=owner):
            return await self._lost_claim(tx.id, last_receive)
        return await self._submit(tx, owner, last_receive=last_receive)

    async def _lost_claim(self, transaction_id: str, last_receive: bool) -> Outcome:
        """Someone changed the row between our read and our claim. Only a finished row lets
        this message go; otherwise it comes back shortly and is decided afresh (deleting it
        could leave the row with no message at all)."""
        async with self.sessions() as session:
            current = await repository.load(session, transaction_id)
        if (
            current is None
            or is_terminal(current.status)
            or current.status
            in (
                TxStatus.submitted,
                TxStatus.mined,
            )
        ):
            return Outcome.done("lost_claim")
        return Outcome(
            Failure.transient,
            "claim lost to a concurrent writer",
            retry_after_s=1,
            action="lost_claim_retry",
        )

    async def _give_up(self, tx: Transaction, reason: str) -> Outcome:
        await self._finish(
            tx,
            TxStatus.failed,
            f"executor unavailable after {tx.attempts} attempt(s): {reason}",
            source=SOURCE_DLQ,
            inflight_key=None,
            claimed_by=None,
        )
        return Outcome(Failure.transient, reason, action="gave_up")

    async def fail_after_last_receive(self, transaction_id: str, reason: str) -> None:
        """Called by the worker when the retries of a message are spent (e.g. the database
        was down for every attempt)."""
        async with self.sessions() as session:
            tx = await repository.load(session, transaction_id)
        if (
            tx is None
            or is_terminal(tx.status)
            or tx.status in (TxStatus.submitted, TxStatus.mined)
        ):
            return
        if tx.submit_started_at is not None and tx.executor_tx_id is None:
            return  # in doubt: leave it to the reaper and a later attempt, never guess "failed"
        await self._finish(
            tx,
            TxStatus.failed,
            f"retries exhausted: {reason}",
            source=SOURCE_DLQ,
            inflight_key=None,
            claimed_by=None,
        )

    # --- executor lookups ------------------------------------------------------------------

    async def _find_at_executor(self, tx: Transaction, since: datetime) -> ExecutorTx | None:
        expected = self.executor_payload(tx)
        horizon = since - _CLOCK_SKEW
        candidates: list[ExecutorTx] = []
        for page in range(1, 51):
            items = await self.executor.list_page(page, per_page=100)
            for item in items:
                if (
                    item.created_at is not None
                    and item.created_at >= horizon
                    and _matches(item, expected)
                ):
                    candidates.append(item)
            oldest = min((i.created_at for i in items if i.created_at), default=None)
            if len(items) < 100 or (oldest is not None and oldest < horizon):
                break
        if not candidates:
            return None
        async with self.sessions() as session:
            taken = await repository.executor_ids_taken(
                session, [c.id for c in candidates], except_id=tx.id
            )
        free = [c for c in candidates if c.id not in taken]
        # The earliest match after the stamp is the one our earlier attempt created.
        free.sort(key=lambda c: c.created_at or since)
        return free[0] if free else None

    def executor_payload(self, tx: Transaction) -> dict[str, Any]:
        request = tx.request
        if tx.type == TxType.gasless:
            fwd = request["request"]
            forward = ethereum.ForwardRequest(
                sender=fwd["from"],
                to=fwd["to"],
                value=int(fwd["value"]),
                gas=int(fwd["gas"]),
                nonce=int(fwd["nonce"]),
                deadline=int(fwd["deadline"]),
                data=fwd["data"],
            )
            payload: dict[str, Any] = {
                "to": request["forwarder"],
                "data": ethereum.forwarder_execute_calldata(forward, request["signature"]),
                "value": fwd["value"],
                "gas_limit": forward.gas + self.settings.forwarder_gas_overhead,
                "speed": "fast",
            }
        else:
            payload = {
                "to": request["to"],
                "data": request.get("data") or "0x",
                "value": request.get("value") or "0",
                "speed": request.get("speed") or "fast",
            }
            if request.get("gasLimit"):
                payload["gas_limit"] = int(request["gasLimit"])
        if tx.valid_until is not None:
            payload["valid_until"] = (
                tx.valid_until.replace(tzinfo=UTC).isoformat().replace("+00:00", "Z")
            )
        return payload

    # --- writes ----------------------------------------------------------------------------

    async def _record_submitted(self, tx: Transaction, result: ExecutorTx) -> None:
        """The executor has it: record that whatever else touched the row meanwhile (a
        released or touched claim only bumps the version)."""
        for _ in range(5):
            if await self._write(
                tx,
                TxStatus.submitted,
                executor_tx_id=result.id,
                hash=result.hash,
                submitted_at=utcnow(),
                claimed_by=None,
                result={"executor": {"id": result.id, "status": result.status}},
            ):
                return
            async with self.sessions() as session:
                current = await repository.load(session, tx.id)
            if current is None:
                return
            if current.executor_tx_id is not None:
                if current.executor_tx_id != result.id:
                    await self._cancel_surplus(tx.id, current.executor_tx_id, result.id)
                return
            tx = current
        raise RuntimeError("could not record the executor's answer")

    async def _cancel_surplus(self, transaction_id: str, recorded: str, surplus: str) -> None:
        """A second executor transaction for one of ours: the timing bounds were broken.
        Cancel the surplus one at the executor (a pending transaction is canceled at once)."""
        try:
            await self.executor.cancel(surplus)
            outcome = "canceled"
        except ExecutorError as exc:
            outcome = f"cancel failed: {exc}"
        log.error(
            "consumer.double_submission",
            extra={
                "transactionId": transaction_id,
                "recorded": recorded,
                "surplus": surplus,
                "outcome": outcome,
            },
        )

    async def _finish(
        self, tx: Transaction, status: TxStatus, reason: str, *, source: str = SOURCE, **values: Any
    ) -> None:
        await self._write(tx, status, reason=reason, source=source, error=reason, **values)

    async def _write(
        self,
        tx: Transaction,
        status: TxStatus | str,
        *,
        reason: str | None = None,
        source: str = SOURCE,
        **values: Any,
    ) -> bool:
        """Compare-and-set, committed (with other messages' writes), then written through to
        Redis (MySQL first, always). On success ``tx`` holds the new state."""
        change = Change(tx, str(status), source=source, reason=reason, values=values)
        return await self.writes.write(change)

    async def touch_claim(self, transaction_id: str, message_id: str) -> None:
        async with self.sessions() as session, session.begin():
            await repository.touch_claim(session, transaction_id, self.owner(message_id), utcnow())

    async def release_claim(self, transaction_id: str, message_id: str) -> None:
        async with self.sessions() as session, session.begin():
            await repository.release_claim(session, transaction_id, self.owner(message_id))

    # --- the reaper ------------------------------------------------------------------------

    async def reap_stale_claims(self, limit: int = 100) -> int:
        """Return claims nobody has touched for ``consumer_stale_claim_s`` to ``pending`` with
        ``enqueued_at`` cleared, so the API's sweeper enqueues them again."""
        cutoff = utcnow() - timedelta(seconds=self.settings.consumer_stale_claim_s)
        async with self.sessions() as session:
            stale = await repository.stale_claims(session, cutoff, limit)
        reaped = 0
        for tx in stale:
            if await self._write(
                tx,
                TxStatus.pending,
                reason="stale claim returned by the reaper",
                source="reaper",
                claimed_by=None,
                enqueued_at=None,
            ):
                reaped += 1
                log.warning("consumer.reaper.returned", extra={"transactionId": tx.id})
        return reaped


def _matches(item: ExecutorTx, expected: dict[str, Any]) -> bool:
    def norm(data: str | None) -> str:
        text = (data or "").lower()
        return text if text.startswith("0x") else "0x" + text

    return (
        (item.to or "").lower() == str(expected["to"]).lower()
        and norm(item.data) == norm(expected["data"])
        and (item.value or 0) == int(expected["value"])
    )
