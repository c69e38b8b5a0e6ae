"""One unit of work per message: reload the row, decide from it, claim it, execute it once.

The exactly-once argument, step by step:

1. A claim is a compare-and-set on the row's version, so two deliveries of the same message
   cannot both proceed.
2. The claim also stamps ``submit_started_at`` and is committed *before* the executor call.
   The executor's id is recorded (with status ``submitted``) right after it answers.
3. A later attempt that finds ``submit_started_at`` set and no executor id is *in doubt*: the
   earlier call may or may not have reached the executor. Nothing is decided until that call
   has *settled*: an attempt never starts its executor call later than
   ``consumer_submit_budget_s`` after its stamp, the whole call (pool, connect, send, answer)
   is cut off after ``executor_timeout_s``, and the executor stops acting on a request after
   ``executor_handler_timeout_s``. Then the executor's list is read back past the stamp
   (``lookup``: complete, or no decision at all) and the row adopts its transaction, or, if
   there is none, submits afresh. Should those bounds ever be broken anyway, the late
   duplicate is detected when it answers and canceled at the executor.
4. Two holders of the same message (its visibility lapsed while the first was still working)
   do not both proceed: an active claim by the same message makes the second one wait.
5. One executor transaction belongs to one row (a unique index). A row whose answer was taken
   by another row's adoption (same to, data and value) decides afresh like an in-doubt one.

Gasless requests in nonce order (DESIGN invariant 7). The forwarder takes a signer's nonces
strictly in sequence: a request sent before its predecessor executed reverts on chain and
burns the relayer's gas. SQS delivers in any order, and neither a FIFO group nor the order of
submission to the executor would be enough (an executor may prepare and mine its queue in its
own order). So a request goes to the executor only when the chain says it is its turn: the
forwarder's ``nonces(signer)`` equals its nonce, which means every predecessor has executed
(whoever relayed it). Until then it waits, its message coming back every
``consumer_nonce_poll_s`` without spending the growing back-off; if the predecessor has not
executed within ``consumer_nonce_wait_s`` it fails with that reason, and a nonce the chain has
already used fails at once. One signer's requests thus run one block after the other, while
different signers' run side by side. This needs ``chain_rpc_url``; without it, order is left
to the executor.

Executor failures that say nothing about the transaction itself (down, 429, 5xx, 401/403,
timeouts) are retried for ``consumer_retry_budget_s`` from the first attempt, then failed, but
only once it is certain the executor has nothing of it (a refused call, or a complete lookup
that found nothing); only the executor refusing the transaction (400/422) fails it at once. A
database outage is waited out (nothing can be recorded meanwhile). While the executor circuit
is open nothing is claimed or sent.
"""

from __future__ import annotations

import logging
import os
import random
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from queue_consumer import metrics
from queue_consumer.circuit import CircuitOpen, ExecutorGuard
from queue_consumer.retry import Failure
from queue_consumer.settings import ConsumerSettings
from queue_consumer.transactions import repository
from queue_consumer.transactions.group_commit import GroupCommit
from queue_consumer.transactions.lookup import ExecutorLookup, choose
from relay_core import ethereum, evm
from relay_core.db.models import Transaction, utcnow
from relay_core.db.transitions import Change
from relay_core.executor import ErrorKind, ExecutorClient, ExecutorError, ExecutorTx
from relay_core.fees import FeeOracle
from relay_core.policy import (
    DAY,
    FEE,
    VALUE,
    PolicyCache,
    PolicyRefused,
    Spend,
    SpendPolicy,
    bucket_of,
    reserve,
)
from relay_core.settings import Environment
from relay_core.statuses import TxStatus, TxType, is_terminal

log = logging.getLogger(__name__)

SOURCE = "consumer"
SOURCE_DLQ = "consumer.dlq"  # the pipeline counts dead-lettered transactions by this source

# How often one decision may lose an adoption to another row before the message is retried.
_ADOPTION_ROUNDS = 3


class _Conflict(Exception):
    """The executor id is recorded against another row (unique index)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one attempt achieved. ``failure`` None means the message is finished."""

    failure: Failure | None = None
    reason: str = ""
    retry_after_s: float | None = None
    action: str = "done"
    # The transaction's own failed attempts, which its back-off grows with (retry.plan_retry).
    attempts: int | None = None
    # What the database answered with, when it did not answer (the database circuit's count).
    database_error: BaseException | None = None

    @classmethod
    def done(cls, action: str) -> Outcome:
        return cls(action=action)


def circuit_open(retry_in_s: float) -> Outcome:
    """A message that found the executor circuit open waits for the circuit, not for a
    back-off of its own: it is visible again soon after the probe is due (the pollers receive
    nothing until the circuit closes, so it then waits in SQS without spending receives)."""
    return Outcome(
        Failure.deferred,
        "executor circuit open",
        retry_after_s=retry_in_s + random.uniform(0.5, 2),
        action="circuit_open",
    )


class TransactionProcessor:
    def __init__(
        self,
        settings: ConsumerSettings,
        sessions: async_sessionmaker[AsyncSession],
        executor: ExecutorClient,
        writes: GroupCommit,
        guard: ExecutorGuard,
        lookup: ExecutorLookup,
        rpc: evm.EvmRpc | None = None,
    ) -> None:
        self.settings = settings
        self.sessions = sessions
        self.executor = executor
        self.writes = writes
        self.guard = guard
        self.lookup = lookup
        self.rpc = rpc
        self.policies = PolicyCache(sessions) if sessions is not None else None
        self.fees = FeeOracle(rpc, settings.max_fee_per_gas_wei)
        self._nonce_wait = timedelta(seconds=settings.consumer_nonce_wait_s)
        self.consumer_id = settings.consumer_id
        self._active_claim = timedelta(seconds=settings.queue_visibility_timeout_s * 0.9)
        self._submit_budget = timedelta(seconds=settings.consumer_submit_budget_s)
        self._settle = self._submit_budget + timedelta(
            seconds=settings.executor_timeout_s + settings.executor_handler_timeout_s + 1
        )
        self._retry_budget = timedelta(seconds=settings.consumer_retry_budget_s)
        self._retention_guard = timedelta(seconds=settings.executor_retention_s * 0.75)
        # Crash-test fault injection: development only (not test, never production).
        dev = settings.environment == Environment.dev
        self._fault = os.environ.get("RELAY_CONSUMER_FAULT", "") if dev else ""
        self.conflicts = 0  # adoptions lost to another row (unique executor id)

    # --- the circuits' probes ----------------------------------------------------------------

    async def probe_executor(self) -> None:
        """The consumer's own half-open probe of the executor: the relayer's status."""
        await self.guard.within_limit(self.executor.probe())

    async def probe_database(self) -> None:
        async with self.sessions() as session:
            await session.execute(text("SELECT 1"))

    # --- the unit of work -------------------------------------------------------------------

    def owner(self, message_id: str) -> str:
        """Claims are owned by a message (and say which process holds it): a redelivery of the
        same message may take its own claim over, a different copy of it may not."""
        return f"{message_id}@{self.consumer_id}"[:64]

    async def load_many(self, transaction_ids: list[str]) -> dict[str, Transaction]:
        """Snapshots of a receive batch's rows in one query (``process`` takes them)."""
        if not transaction_ids:
            return {}
        if self.writes.direct is not None:
            return await repository.load_many_direct(self.writes.direct, transaction_ids)
        async with self.sessions() as session:
            return await repository.load_many(session, transaction_ids)

    async def process(
        self, transaction_id: str, message_id: str, *, snapshot: Transaction | None = None
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
        if (
            tx.status == TxStatus.processing
            and tx.claimed_by is not None
            and tx.claimed_at is not None
            and now - tx.claimed_at < self._active_claim
        ):
            if tx.claimed_by.split("@", 1)[0] == message_id:
                # This very message is still being worked on elsewhere (its visibility
                # lapsed): wait for that attempt rather than race it.
                remaining = (tx.claimed_at + self._active_claim - now).total_seconds()
                return Outcome(
                    Failure.deferred,
                    "still being processed by another consumer",
                    retry_after_s=remaining,
                    action="busy_elsewhere",
                )
            # Another copy of the message is being worked on right now; it holds its own
            # message, which will be deleted or retried on its own.
            return Outcome.done("duplicate")

        owner = self.owner(message_id)
        in_doubt_since = tx.submit_started_at if tx.executor_tx_id is None else None
        if in_doubt_since is not None:
            return await self._in_doubt(tx, in_doubt_since, owner)
        if tx.valid_until is not None and tx.valid_until <= now:
            if not await self._finish(
                tx, TxStatus.expired, "validUntil passed before submission", inflight_key=None
            ):
                return await self._lost_claim(tx.id)
            return Outcome.done("expired")
        return await self._submit_if_allowed(tx, owner)

    async def _submit_if_allowed(self, tx: Transaction, owner: str) -> Outcome:
        """Submit, unless the client's policy refuses it or a gasless predecessor must go
        first: the last checks of a fresh attempt and of an in-doubt one decided afresh."""
        refused = await self._refused_by_policy(tx)
        if refused is not None:
            return refused
        if tx.type == TxType.gasless and self.rpc is not None:
            held = await self._nonce_turn(tx)
            if held is not None:
                return held
        return await self._submit(tx, owner)

    async def _refused_by_policy(self, tx: Transaction) -> Outcome | None:
        """The client's spend policy, as it is now, checked again before anything is sent
        (relay_core.policy): a policy tightened after a leak stops what is already queued, a
        revoked key's transactions are not sent. And the daily budgets are judged when the
        money moves: a transaction whose reservation has left the 24 hours (it waited a day, in
        a paused lane or an outage) or that has none (its budget came after it) reserves again
        now, in the window it executes in, or is refused."""
        if self.policies is None:
            return None
        current = await self.policies.get(tx.client_id)
        if current is None:
            return None
        fee_per_gas = None
        if current.prices_fees and tx.reserved_fee_wei is None:
            speed = tx.request.get("speed") if tx.type == TxType.direct else "fast"
            fee_per_gas = await self.fees.max_fee_per_gas(speed)
        spend = Spend.of(
            tx.type,
            tx.request,
            fee_per_gas=fee_per_gas,
            forwarder_overhead=self.settings.forwarder_gas_overhead,
        )
        if tx.reserved_fee_wei is not None:  # judged as it was reserved
            spend = replace(spend, fee=int(tx.reserved_fee_wei))
        try:
            current.check(spend)
            if not await self._reserved_in_window(tx, current, spend):
                # A budget an operator lowered below what the day holds stops what spends
                # from it (a transaction of no value is not held by the value budget).
                amounts = {VALUE.rule: spend.value, FEE.rule: spend.fee or 0}
                for kind, spent in await self.policies.over_budget(tx.client_id, current):
                    if not amounts[kind.rule]:
                        continue
                    raise PolicyRefused(
                        kind.rule,
                        f"this client's last 24 hours hold {spent} wei, above its budget of "
                        f"{kind.of(current)}",
                    )
        except PolicyRefused as refused:
            reason = f"refused before submission: {refused.detail}"
            if not await self._finish(tx, TxStatus.failed, reason, inflight_key=None):
                return await self._lost_claim(tx.id)
            return Outcome(Failure.permanent, reason, action="policy_refused")
        return None

    async def _reserved_in_window(
        self, tx: Transaction, current: SpendPolicy, spend: Spend
    ) -> bool:
        """Reserve ``spend`` again in the current 24 hours if its reservation left them or
        it has none while the client has a budget for it (refusing if it does not fit).
        True when it did."""
        value = spend.value if current.daily_value_wei is not None else 0
        fee = (spend.fee or 0) if current.daily_fee_wei is not None else 0
        if not value and not fee:
            return False
        now = utcnow()
        if tx.spend_bucket is not None and tx.spend_bucket >= bucket_of(now - DAY):
            return False  # still counted in the window it is sent in
        async with self.sessions() as session, session.begin():
            bucket = await reserve(session, tx.client_id, current, value, now, fee=fee)
        values: dict[str, Any] = {"spend_bucket": bucket}
        if fee:
            values["reserved_fee_wei"] = str(fee)
        if not await self._write(tx, tx.status, **values):
            log.warning("consumer.budget.reservation_unrecorded", extra={"transactionId": tx.id})
        log.info(
            "consumer.budget.reserved_at_submission",
            extra={"transactionId": tx.id, "valueWei": str(value), "feeWei": str(fee)},
        )
        return True

    async def _nonce_turn(self, tx: Transaction) -> Outcome | None:
        """A gasless request goes to the executor only when the forwarder expects its nonce
        next: its predecessors from the same signer have executed on chain. The forwarder
        takes a signer's nonces strictly in sequence (a later one would revert), and the queue
        delivers in any order, so each request waits its turn here, the chain being the one
        source of truth: a predecessor sent by another relayer counts as much as one of ours.
        A request whose predecessor does not execute within ``consumer_nonce_wait_s`` of its
        first turn check fails with the reason; one whose nonce the chain has already used
        fails at once."""
        fwd = tx.request["request"]
        nonce, sender = int(fwd["nonce"]), str(fwd["from"])
        try:
            expected = await evm.forwarder_nonce(self.rpc, tx.request["forwarder"], sender)  # type: ignore[arg-type]
        except (evm.RpcError, evm.RpcUnavailable) as exc:
            return Outcome(
                Failure.held,
                f"the chain did not say whose turn it is: {exc}"[:300],
                retry_after_s=random.uniform(2, 5),
                action="nonce_unknown",
            )
        if expected == nonce:
            return None
        if expected > nonce:
            reason = (
                f"request.nonce {nonce} was already used on chain; the forwarder expects "
                f"{expected} next from {sender}"
            )
            if not await self._finish(tx, TxStatus.failed, reason, inflight_key=None):
                return await self._lost_claim(tx.id)
            return Outcome(Failure.permanent, reason, action="nonce_used")
        waiting_since = tx.first_attempt_at
        if waiting_since is None:
            waiting_since = utcnow()
            if not await self._write(tx, tx.status, first_attempt_at=waiting_since):
                return await self._lost_claim(tx.id)
        if utcnow() - waiting_since > self._nonce_wait:
            reason = (
                f"nonce {expected} of {sender} never executed within "
                f"{self._nonce_wait.total_seconds():.0f} s, so nonce {nonce} could not either"
            )
            if not await self._finish(tx, TxStatus.failed, reason, inflight_key=None):
                return await self._lost_claim(tx.id)
            return Outcome(Failure.permanent, reason, action="predecessor_missing")
        return Outcome(
            Failure.held,
            f"waiting for nonce {expected} of {sender} to execute first",
            retry_after_s=self.settings.consumer_nonce_poll_s * random.uniform(1, 1.5),
            action="held_for_predecessor",
        )

    async def _submit(self, tx: Transaction, owner: str) -> Outcome:
        """Claim (stamping the attempt) and call the executor, holding an executor slot for
        both so the call follows the stamp at once."""
        if not self.guard.breaker.may_call():
            return self._circuit_open(self.guard.breaker.retry_in())
        payload = self.executor_payload(tx)
        try:
            async with self.guard.slot() as permit:
                now = utcnow()
                if not await self._write(
                    tx,
                    TxStatus.processing,
                    attempts=tx.attempts + 1,
                    claimed_by=owner,
                    claimed_at=now,
                    submit_started_at=now,
                    first_attempt_at=tx.first_attempt_at or now,
                ):
                    return await self._lost_claim(tx.id)
                if tx.attempts == 1:  # its first claim: how long it waited for a consumer
                    metrics.CLAIM_LAG.observe(tx.lane, (now - tx.created_at).total_seconds())
                if utcnow() - now > self._submit_budget:
                    # The claim took so long to commit that the in-doubt rule's bound on when
                    # the call starts would be broken: withdraw the stamp (nothing was sent).
                    await self._write(tx, tx.status, submit_started_at=None, claimed_by=None)
                    return Outcome(
                        Failure.transient,
                        "submit budget exceeded",
                        action="late_submit",
                        attempts=tx.attempts,
                    )
                log.debug("consumer.submit.started", extra={"transactionId": tx.id})
                try:
                    result = await permit.run(
                        self.executor.submit(payload), timeout_s=self.settings.executor_timeout_s
                    )
                except TimeoutError:
                    raise ExecutorError(
                        ErrorKind.timeout, "executor did not answer in time"
                    ) from None
        except CircuitOpen as exc:
            return self._circuit_open(exc.retry_in_s)
        except ExecutorError as exc:
            return await self._after_failed_submit(tx, exc)
        if self._fault == "exit-after-submit":
            os._exit(70)  # fault injection for the crash tests: die before recording
        return await self._record_answer(tx, result, owner)

    async def _after_failed_submit(self, tx: Transaction, exc: ExecutorError) -> Outcome:
        if exc.kind is ErrorKind.rejected:
            if not await self._finish(
                tx,
                TxStatus.failed,
                f"executor rejected the transaction: {exc.message}",
                source=SOURCE_DLQ,
                inflight_key=None,
                claimed_by=None,
            ):
                return await self._lost_claim(tx.id)
            return Outcome(Failure.permanent, str(exc), action="rejected")
        if not exc.certain_not_created:
            # In doubt: the executor may have it. The stamp stays; a later attempt decides.
            await self._write(tx, tx.status, claimed_by=None)
            return Outcome(
                Failure.deferred,
                f"in doubt: {exc}",
                retry_after_s=self._settle_in(tx.submit_started_at),
                action="retry_in_doubt",
            )
        # Nothing reached the executor: forget the stamp so the retry is a plain submit.
        if not await self._write(tx, tx.status, submit_started_at=None, claimed_by=None):
            return await self._lost_claim(tx.id)
        if self._budget_spent(tx):
            return await self._give_up(tx, str(exc))
        failure = Failure.rate_limited if exc.kind is ErrorKind.rate_limited else Failure.transient
        return Outcome(
            failure,
            str(exc),
            retry_after_s=exc.retry_after_s,
            action="retry",
            attempts=tx.attempts,
        )

    def _budget_spent(self, tx: Transaction) -> bool:
        return utcnow() - (tx.first_attempt_at or tx.created_at) > self._retry_budget

    async def _give_up(self, tx: Transaction, last_error: str) -> Outcome:
        """Transient failures for longer than the budget, with nothing at the executor (so
        failing cannot hide an execution)."""
        if not await self._finish(
            tx,
            TxStatus.failed,
            f"executor unavailable for {self._retry_budget.total_seconds():.0f} s "
            f"after {tx.attempts} attempt(s): {last_error}",
            source=SOURCE_DLQ,
            inflight_key=None,
            claimed_by=None,
        ):
            return await self._lost_claim(tx.id)
        return Outcome(Failure.exhausted, last_error, action="budget_spent")

    # --- in doubt ---------------------------------------------------------------------------

    async def _in_doubt(self, tx: Transaction, started: datetime, owner: str) -> Outcome:
        wait_s = self._settle_in(started)
        if wait_s > 0:
            return Outcome(
                Failure.deferred,
                "earlier submit in doubt; waiting for it to settle",
                retry_after_s=wait_s,
                action="wait_settle",
            )
        if utcnow() - started > self._retention_guard:
            # The executor may already have deleted a finished record: resubmitting could
            # execute twice, so stop and ask a human.
            if not await self._finish(
                tx,
                TxStatus.failed,
                "earlier submit in doubt beyond the executor's retention; check manually",
                source=SOURCE_DLQ,
                claimed_by=None,
            ):
                return await self._lost_claim(tx.id)
            metrics.IN_DOUBT.inc("failed")
            log.error("consumer.in_doubt.beyond_retention", extra={"transactionId": tx.id})
            return Outcome(Failure.permanent, "in doubt beyond retention", action="in_doubt_failed")
        if not self.guard.breaker.may_call():
            return self._circuit_open(self.guard.breaker.retry_in())
        if not await self._write(
            tx,
            TxStatus.processing,
            attempts=tx.attempts + 1,
            claimed_by=owner,
            claimed_at=utcnow(),
            first_attempt_at=tx.first_attempt_at or started,
        ):
            return await self._lost_claim(tx.id)
        return await self._decide(tx, started, owner)

    async def _decide(self, tx: Transaction, started: datetime, owner: str) -> Outcome:
        """The attempt stamped ``started`` has settled and ``tx`` is claimed: adopt what it
        created, or, if the complete list shows nothing free, submit afresh."""
        payload = self.executor_payload(tx)
        for _ in range(_ADOPTION_ROUNDS):
            found = await self.lookup.find(payload, started)
            if not found.complete:
                metrics.IN_DOUBT.inc("lookup_incomplete")
                await self._write(tx, tx.status, claimed_by=None)
                return Outcome(
                    Failure.transient,
                    f"in doubt; executor lookup incomplete: {found.reason}",
                    retry_after_s=self.guard.breaker.retry_in() or None,
                    action="lookup_incomplete",
                    attempts=tx.attempts,
                )
            async with self.sessions() as session:
                taken = await repository.executor_ids_taken(
                    session, [m.id for m in found.matches], except_id=tx.id
                )
            chosen = choose(found.matches, taken)
            log.debug(
                "consumer.in_doubt.looked_up",
                extra={
                    "transactionId": tx.id,
                    "stamp": str(started),
                    "matches": len(found.matches),
                    "chosen": chosen and chosen.id,
                },
            )
            if chosen is None:
                break
            try:
                if await self._record(tx, chosen):
                    metrics.IN_DOUBT.inc("adopted")
                    return Outcome.done("adopted")
                return await self._lost_claim(tx.id)
            except _Conflict:
                self.conflicts += 1
                metrics.CLAIM_CONFLICTS.inc("adoption")
                log.info(
                    "consumer.claim_conflict",
                    extra={"transactionId": tx.id, "executorTxId": chosen.id},
                )
        else:
            await self._write(tx, tx.status, claimed_by=None)
            return Outcome(
                Failure.deferred,
                "in doubt; every match was taken by another row meanwhile",
                retry_after_s=1,
                action="adoption_conflict",
            )
        # Certain now: the executor has nothing of ours. Submit afresh under a new stamp,
        # unless that is no longer wanted (expired) or the executor has failed us too long.
        if tx.valid_until is not None and tx.valid_until <= utcnow():
            if not await self._finish(
                tx,
                TxStatus.expired,
                "validUntil passed before submission",
                inflight_key=None,
                claimed_by=None,
            ):
                return await self._lost_claim(tx.id)
            metrics.IN_DOUBT.inc("expired")
            return Outcome.done("expired")
        if not await self._write(tx, tx.status, submit_started_at=None, claimed_by=None):
            return await self._lost_claim(tx.id)
        metrics.IN_DOUBT.inc("resubmitted")
        if self._budget_spent(tx):
            return await self._give_up(tx, "no attempt got an answer from the executor")
        return await self._submit_if_allowed(tx, owner)

    def _settle_in(self, started: datetime | None) -> float:
        if started is None:
            return 0.0
        return max(0.0, (started + self._settle - utcnow()).total_seconds())

    async def _lost_claim(self, transaction_id: str) -> Outcome:
        """Someone changed the row between our read and our write. Only a finished row lets
        this message go; otherwise it comes back shortly and is decided afresh (deleting it
        could leave the row with no message at all)."""
        metrics.CLAIM_CONFLICTS.inc("lost")
        async with self.sessions() as session:
            current = await repository.load(session, transaction_id)
        if (
            current is None
            or is_terminal(current.status)
            or current.status in (TxStatus.submitted, TxStatus.mined)
        ):
            return Outcome.done("lost_claim")
        return Outcome(
            Failure.deferred,
            "claim lost to a concurrent writer",
            retry_after_s=1,
            action="lost_claim_retry",
        )

    @staticmethod
    def _circuit_open(retry_in_s: float) -> Outcome:
        return circuit_open(retry_in_s)

    # --- recording the executor's answer ------------------------------------------------------

    async def _record_answer(self, tx: Transaction, result: ExecutorTx, owner: str) -> Outcome:
        """The executor answered: record its id. If another row's adoption took that id
        meanwhile (same to, data and value), this row decides afresh: its call has settled."""
        started = tx.submit_started_at
        try:
            recorded = await self._record(tx, result)
        except _Conflict:
            self.conflicts += 1
            log.info(
                "consumer.claim_conflict",
                extra={"transactionId": tx.id, "executorTxId": result.id, "answered": True},
            )
            assert started is not None
            return await self._decide(tx, started, owner)
        return Outcome.done("submitted" if recorded else "lost_claim")

    async def _record(self, tx: Transaction, result: ExecutorTx) -> bool:
        """Record ``result`` as this row's executor transaction, whatever else changed the row's
        version meanwhile (the reaper, the reconciler, another attempt). False if the row was
        finished or recorded by someone else (then a surplus is canceled). Raises _Conflict if
        another row holds ``result``."""
        for _ in range(5):
            try:
                written = await self._write(
                    tx,
                    TxStatus.submitted,
                    executor_tx_id=result.id,
                    hash=result.hash,
                    submitted_at=utcnow(),
                    claimed_by=None,
                    result={"executor": {"id": result.id, "status": result.status}},
                )
            except IntegrityError as exc:
                raise _Conflict(result.id) from exc
            if written:
                return True
            async with self.sessions() as session:
                current = await repository.load(session, tx.id)
            if current is None:
                return False
            if current.executor_tx_id is not None:
                if current.executor_tx_id != result.id:
                    await self._cancel_surplus(tx.id, current.executor_tx_id, result.id)
                return current.executor_tx_id == result.id
            if is_terminal(current.status):
                return False
            tx = current
        raise RuntimeError("could not record the executor's answer")

    async def _cancel_surplus(self, transaction_id: str, recorded: str, surplus: str) -> None:
        """A second executor transaction for one of ours: the timing bounds were broken.
        Cancel the surplus one at the executor (a pending transaction is canceled at once)."""
        try:
            async with self.guard.slot() as permit:
                await permit.run(
                    self.executor.cancel(surplus), timeout_s=self.settings.executor_timeout_s
                )
            outcome = "canceled"
        except (ExecutorError, CircuitOpen, TimeoutError) as exc:
            outcome = f"cancel failed, cancel it by hand: {exc}"
        log.error(
            "consumer.double_submission",
            extra={
                "transactionId": transaction_id,
                "recorded": recorded,
                "surplus": surplus,
                "outcome": outcome,
            },
        )

    # --- payload ----------------------------------------------------------------------------

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

    async def _finish(
        self, tx: Transaction, status: TxStatus, reason: str, *, source: str = SOURCE, **values: Any
    ) -> bool:
        return await self._write(tx, status, reason=reason, source=source, error=reason, **values)

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
