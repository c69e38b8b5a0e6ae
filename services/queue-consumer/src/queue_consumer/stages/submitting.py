"""Submitting: a claimed row goes to the executor once, and an attempt that may have reached
it is settled before anything else is decided.

1. The claim stamps ``submit_started_at`` and is committed *before* the executor call; the
   executor's id is recorded (status ``submitted``) right after it answers (``recording``).
2. A later attempt that finds ``submit_started_at`` set and no executor id is *in doubt*: the
   earlier call may or may not have reached the executor. Nothing is decided until that call
   has *settled*: an attempt never starts its executor call later than
   ``consumer_submit_budget_s`` after its stamp, the whole call (pool, connect, send, answer)
   is cut off after ``executor_timeout_s``, and the executor stops acting on a request after
   ``executor_handler_timeout_s``. Then the executor's list is read back past the stamp
   (``transactions.lookup``: complete, or no decision at all) and the row adopts its
   transaction, or, if there is none, submits afresh. Should those bounds ever be broken
   anyway, the late duplicate is detected when it answers and canceled at the executor.
3. A row whose answer was taken by another row's adoption (same to, data and value) decides
   afresh like an in-doubt one.

Before each submit the row passes its gates (``gates``: the spend policy, the nonce turn).
Executor failures that say nothing about the transaction itself (down, 429, 5xx, 401/403,
timeouts) are retried for ``consumer_retry_budget_s`` from the first attempt, then failed, but
only once it is certain the executor has nothing of it (a refused call, or a complete lookup
that found nothing); only the executor refusing the transaction (400/422) fails it at once.
While the executor circuit is open nothing is claimed or sent.
"""

from __future__ import annotations

import logging
import os
from datetime import datetime, timedelta

from queue_consumer import metrics
from queue_consumer.circuit import CircuitOpen
from queue_consumer.pool import Pool
from queue_consumer.retry import Failure
from queue_consumer.settings import ConsumerSettings
from queue_consumer.stages.claiming import Turn
from queue_consumer.stages.gates import NonceTurn, SpendGate
from queue_consumer.stages.outcome import Outcome, circuit_open
from queue_consumer.stages.recording import SOURCE_DLQ, Conflict, Recorder
from queue_consumer.transactions import repository
from queue_consumer.transactions.lookup import choose
from relay_core.db.models import Transaction, utcnow
from relay_core.executor import ErrorKind, ExecutorError, ExecutorTx
from relay_core.payload import executor_payload
from relay_core.settings import Environment
from relay_core.statuses import TxStatus, TxType

log = logging.getLogger(__name__)

# How often one decision may lose an adoption to another row before the message is retried.
_ADOPTION_ROUNDS = 3


class Submitter:
    def __init__(
        self,
        settings: ConsumerSettings,
        pool: Pool,
        recorder: Recorder,
        spend: SpendGate,
        nonces: NonceTurn | None,
    ) -> None:
        self.pool = pool
        self.recorder = recorder
        self.spend = spend
        self.nonces = nonces
        self._overhead = settings.forwarder_gas_overhead
        self._timeout_s = settings.executor_timeout_s
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

    async def attempt(self, turn: Turn) -> Outcome:
        """Settle an earlier attempt in doubt, or submit: ``turn``'s row, unless it expired."""
        tx = turn.tx
        in_doubt_since = tx.submit_started_at if tx.executor_tx_id is None else None
        if in_doubt_since is not None:
            return await self._in_doubt(turn, in_doubt_since)
        if tx.valid_until is not None and tx.valid_until <= utcnow():
            if not await self.recorder.finish(
                tx, TxStatus.expired, "validUntil passed before submission", inflight_key=None
            ):
                return await self.recorder.lost_claim(tx.id)
            return Outcome.done("expired")
        return await self._through_gates(turn)

    async def _through_gates(self, turn: Turn) -> Outcome:
        """Submit, unless its client canceled it meanwhile, the client's policy refuses it or
        a gasless predecessor must go first: the last checks of a fresh attempt and of an
        in-doubt one decided afresh (nothing of it at the executor)."""
        if turn.tx.cancel_requested_at is not None:
            # Asked for while an earlier attempt held it; that attempt sent nothing after all.
            if not await self.recorder.finish(
                turn.tx,
                TxStatus.canceled,
                "canceled by its client before it was sent",
                inflight_key=None,
                cancel_requested_at=None,
                claimed_by=None,
            ):
                return await self.recorder.lost_claim(turn.tx.id)
            return Outcome.done("canceled")
        stopped = await self.spend.refused(turn.tx)
        if stopped is None and turn.tx.type == TxType.gasless and self.nonces is not None:
            stopped = await self.nonces.held(turn.tx)
        return stopped if stopped is not None else await self._submit(turn)

    async def _submit(self, turn: Turn) -> Outcome:
        """Claim (stamping the attempt) and call the executor, holding an executor slot for
        both so the call follows the stamp at once."""
        tx = turn.tx
        member = self.pool.choose(tx)
        if member is None:
            return self._no_relayer(tx)
        payload = executor_payload(tx, self._overhead)
        try:
            async with member.guard.slot() as permit:
                now = utcnow()
                if not await self.recorder.claim(tx, turn.owner, now, relayer=member.id):
                    return await self.recorder.lost_claim(tx.id)
                if tx.attempts == 1:  # its first claim: how long it waited for a consumer
                    metrics.CLAIM_LAG.observe(tx.lane, (now - tx.created_at).total_seconds())
                if utcnow() - now > self._submit_budget:
                    # The claim took so long to commit that the in-doubt rule's bound on when
                    # the call starts would be broken: withdraw the stamp (nothing was sent).
                    await self.recorder.write(
                        tx, tx.status, submit_started_at=None, claimed_by=None
                    )
                    return Outcome(
                        Failure.transient,
                        "submit budget exceeded",
                        action="late_submit",
                        attempts=tx.attempts,
                    )
                log.debug("consumer.submit.started", extra={"transactionId": tx.id})
                try:
                    result = await permit.run(
                        member.client.submit(payload), timeout_s=self._timeout_s
                    )
                except TimeoutError:
                    raise ExecutorError(
                        ErrorKind.timeout, "executor did not answer in time"
                    ) from None
        except CircuitOpen as exc:
            return circuit_open(exc.retry_in_s)
        except ExecutorError as exc:
            return await self._after_failed_submit(tx, exc)
        if self._fault == "exit-after-submit":
            os._exit(70)  # fault injection for the crash tests: die before recording
        return await self._answered(turn, result)

    def _no_relayer(self, tx: Transaction) -> Outcome:
        """No relayer may take ``tx`` now: the message comes back when one may (a gasless
        request without the chain's RPC waits for its signer's relayer, for nonce order)."""
        if self.pool.closed:  # others take work: only this signer's relayer cannot
            return Outcome(
                Failure.held,
                "waiting for the relayer that keeps its signer's nonce order",
                retry_after_s=self.pool.reopens_at - self.pool.now(),
                action="held_for_relayer",
            )
        return circuit_open(self.pool.retry_in())

    async def _answered(self, turn: Turn, result: ExecutorTx) -> Outcome:
        """The executor answered: record its id. If another row's adoption took that id
        meanwhile (same to, data and value), this row decides afresh: its call has settled."""
        tx = turn.tx
        started = tx.submit_started_at
        try:
            recorded = await self.recorder.record(tx, result)
        except Conflict:
            self.conflicts += 1
            log.info(
                "consumer.claim_conflict",
                extra={"transactionId": tx.id, "executorTxId": result.id, "answered": True},
            )
            assert started is not None
            return await self._decide(turn, started)
        return Outcome.done("submitted" if recorded else "lost_claim")

    async def _after_failed_submit(self, tx: Transaction, exc: ExecutorError) -> Outcome:
        if exc.kind is ErrorKind.rejected:
            if not await self.recorder.finish(
                tx,
                TxStatus.failed,
                f"executor rejected the transaction: {exc.message}",
                source=SOURCE_DLQ,
                inflight_key=None,
                claimed_by=None,
            ):
                return await self.recorder.lost_claim(tx.id)
            return Outcome(Failure.permanent, str(exc), action="rejected")
        if not exc.certain_not_created:
            # In doubt: the executor may have it. The stamp stays; a later attempt decides.
            await self.recorder.write(tx, tx.status, claimed_by=None)
            return Outcome(
                Failure.deferred,
                f"in doubt: {exc}",
                retry_after_s=self._settle_in(tx.submit_started_at),
                action="retry_in_doubt",
            )
        # Nothing reached the executor: forget the stamp so the retry is a plain submit.
        if not await self.recorder.write(tx, tx.status, submit_started_at=None, claimed_by=None):
            return await self.recorder.lost_claim(tx.id)
        if self._budget_spent(tx):
            return await self._give_up(tx, str(exc))
        failure = Failure.rate_limited if exc.kind is ErrorKind.rate_limited else Failure.transient
        return Outcome(
            failure, str(exc), retry_after_s=exc.retry_after_s, action="retry", attempts=tx.attempts
        )

    def _budget_spent(self, tx: Transaction) -> bool:
        return utcnow() - (tx.first_attempt_at or tx.created_at) > self._retry_budget

    async def _give_up(self, tx: Transaction, last_error: str) -> Outcome:
        """Transient failures for longer than the budget, with nothing at the executor (so
        failing cannot hide an execution)."""
        if not await self.recorder.finish(
            tx,
            TxStatus.failed,
            f"executor unavailable for {self._retry_budget.total_seconds():.0f} s "
            f"after {tx.attempts} attempt(s): {last_error}",
            source=SOURCE_DLQ,
            inflight_key=None,
            claimed_by=None,
        ):
            return await self.recorder.lost_claim(tx.id)
        return Outcome(Failure.exhausted, last_error, action="budget_spent")

    # --- in doubt ---------------------------------------------------------------------------

    async def _in_doubt(self, turn: Turn, started: datetime) -> Outcome:
        tx = turn.tx
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
            if not await self.recorder.finish(
                tx,
                TxStatus.failed,
                "earlier submit in doubt beyond the executor's retention; check manually",
                source=SOURCE_DLQ,
                claimed_by=None,
            ):
                return await self.recorder.lost_claim(tx.id)
            metrics.IN_DOUBT.inc("failed")
            log.error("consumer.in_doubt.beyond_retention", extra={"transactionId": tx.id})
            return Outcome(Failure.permanent, "in doubt beyond retention", action="in_doubt_failed")
        breaker = self.pool.member(tx.relayer).breaker
        if not breaker.may_call():  # its answer is at the relayer it went to, nowhere else
            return circuit_open(breaker.retry_in())
        if not await self.recorder.claim(tx, turn.owner, utcnow()):
            return await self.recorder.lost_claim(tx.id)
        return await self._decide(turn, started)

    async def _decide(self, turn: Turn, started: datetime) -> Outcome:
        """The attempt stamped ``started`` has settled and the row is claimed: adopt what it
        created, or, if the complete list shows nothing free, submit afresh."""
        tx = turn.tx
        payload = executor_payload(tx, self._overhead)
        member = self.pool.member(tx.relayer)
        for _ in range(_ADOPTION_ROUNDS):
            found = await member.lookup.find(payload, started)
            if not found.complete:
                metrics.IN_DOUBT.inc("lookup_incomplete")
                await self.recorder.write(tx, tx.status, claimed_by=None)
                return Outcome(
                    Failure.transient,
                    f"in doubt; executor lookup incomplete: {found.reason}",
                    retry_after_s=member.breaker.retry_in() or None,
                    action="lookup_incomplete",
                    attempts=tx.attempts,
                )
            async with self.recorder.sessions() as session:
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
                if await self.recorder.record(tx, chosen):
                    metrics.IN_DOUBT.inc("adopted")
                    return Outcome.done("adopted")
                return await self.recorder.lost_claim(tx.id)
            except Conflict:
                self.conflicts += 1
                metrics.CLAIM_CONFLICTS.inc("adoption")
                log.info(
                    "consumer.claim_conflict",
                    extra={"transactionId": tx.id, "executorTxId": chosen.id},
                )
        else:
            await self.recorder.write(tx, tx.status, claimed_by=None)
            return Outcome(
                Failure.deferred,
                "in doubt; every match was taken by another row meanwhile",
                retry_after_s=1,
                action="adoption_conflict",
            )
        # Certain now: the executor has nothing of ours. Submit afresh under a new stamp,
        # unless that is no longer wanted (expired) or the executor has failed us too long.
        if tx.valid_until is not None and tx.valid_until <= utcnow():
            if not await self.recorder.finish(
                tx,
                TxStatus.expired,
                "validUntil passed before submission",
                inflight_key=None,
                claimed_by=None,
            ):
                return await self.recorder.lost_claim(tx.id)
            metrics.IN_DOUBT.inc("expired")
            return Outcome.done("expired")
        if not await self.recorder.write(tx, tx.status, submit_started_at=None, claimed_by=None):
            return await self.recorder.lost_claim(tx.id)
        metrics.IN_DOUBT.inc("resubmitted")
        if self._budget_spent(tx):
            return await self._give_up(tx, "no attempt got an answer from the executor")
        return await self._through_gates(turn)

    def _settle_in(self, started: datetime | None) -> float:
        if started is None:
            return 0.0
        return max(0.0, (started + self._settle - utcnow()).total_seconds())
