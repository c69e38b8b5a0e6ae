"""The two checks a transaction passes just before it is submitted: the client's spend policy
as it is now, and, for a gasless request, its turn in the signer's nonce order. Each answers
None (go on) or the outcome that stops this attempt.

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
"""

from __future__ import annotations

import logging
import random
from dataclasses import replace
from datetime import timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from queue_consumer.retry import Failure
from queue_consumer.settings import ConsumerSettings
from queue_consumer.stages.outcome import Outcome
from queue_consumer.stages.recording import Recorder
from relay_core import evm
from relay_core.db.models import Transaction, utcnow
from relay_core.fees import FeeOracle
from relay_core.policy import PolicyRefused, Spend, SpendPolicy
from relay_core.policycache import PolicyCache
from relay_core.spending import DAY, FEE, VALUE, bucket_of, reserve
from relay_core.statuses import TxStatus, TxType

log = logging.getLogger(__name__)


class SpendGate:
    """The client's spend policy, as it is now, checked again before anything is sent
    (relay_core.policy): a policy tightened after a leak stops what is already queued, a
    revoked key's transactions are not sent. And the daily budgets are judged when the money
    moves: a transaction whose reservation has left the 24 hours (it waited a day, in a paused
    lane or an outage) or that has none (its budget came after it) reserves again now, in the
    window it executes in, or is refused."""

    def __init__(
        self,
        settings: ConsumerSettings,
        sessions: async_sessionmaker[AsyncSession],
        recorder: Recorder,
        rpc: evm.EvmRpc | None,
    ) -> None:
        self.sessions = sessions
        self.recorder = recorder
        self.policies = PolicyCache(sessions) if sessions is not None else None
        self.fees = FeeOracle(rpc, settings.max_fee_per_gas_wei)
        self._overhead = settings.forwarder_gas_overhead

    async def refused(self, tx: Transaction) -> Outcome | None:
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
            tx.type, tx.request, fee_per_gas=fee_per_gas, forwarder_overhead=self._overhead
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
            if not await self.recorder.finish(tx, TxStatus.failed, reason, inflight_key=None):
                return await self.recorder.lost_claim(tx.id)
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
        if not await self.recorder.write(tx, tx.status, **values):
            log.warning("consumer.budget.reservation_unrecorded", extra={"transactionId": tx.id})
        log.info(
            "consumer.budget.reserved_at_submission",
            extra={"transactionId": tx.id, "valueWei": str(value), "feeWei": str(fee)},
        )
        return True


class NonceTurn:
    """A gasless request goes to the executor only when the forwarder expects its nonce next:
    its predecessors from the same signer have executed on chain. The chain is the one source
    of truth: a predecessor sent by another relayer counts as much as one of ours."""

    def __init__(self, settings: ConsumerSettings, recorder: Recorder, rpc: evm.EvmRpc) -> None:
        self.recorder = recorder
        self.rpc = rpc
        self._wait = timedelta(seconds=settings.consumer_nonce_wait_s)
        self._poll_s = settings.consumer_nonce_poll_s

    async def held(self, tx: Transaction) -> Outcome | None:
        """None when it is ``tx``'s turn; held while a predecessor has not executed, failed
        when it has not within ``consumer_nonce_wait_s`` of the first turn check, or at once
        when the chain has already used the nonce."""
        fwd = tx.request["request"]
        nonce, sender = int(fwd["nonce"]), str(fwd["from"])
        try:
            expected = await evm.forwarder_nonce(self.rpc, tx.request["forwarder"], sender)
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
            return await self._fail(tx, reason, "nonce_used")
        waiting_since = tx.first_attempt_at
        if waiting_since is None:
            waiting_since = utcnow()
            if not await self.recorder.write(tx, tx.status, first_attempt_at=waiting_since):
                return await self.recorder.lost_claim(tx.id)
        if utcnow() - waiting_since > self._wait:
            reason = (
                f"nonce {expected} of {sender} never executed within "
                f"{self._wait.total_seconds():.0f} s, so nonce {nonce} could not either"
            )
            return await self._fail(tx, reason, "predecessor_missing")
        return Outcome(
            Failure.held,
            f"waiting for nonce {expected} of {sender} to execute first",
            retry_after_s=self._poll_s * random.uniform(1, 1.5),
            action="held_for_predecessor",
        )

    async def _fail(self, tx: Transaction, reason: str, action: str) -> Outcome:
        if not await self.recorder.finish(tx, TxStatus.failed, reason, inflight_key=None):
            return await self.recorder.lost_claim(tx.id)
        return Outcome(Failure.permanent, reason, action=action)
