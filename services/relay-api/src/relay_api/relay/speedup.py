"""Speed up: ``POST /api/v1/relay/transactions/{id}/speed-up``, the caller's own transaction,
with a new ``speed``.

- ``pending`` (not sent yet): the row's request takes the new speed, and the fast lane when
  the speed asks for it (a message is sent to that lane; the one in the other lane finds the
  row taken or done and is let go). It is sent at that speed. 200.
- ``processing``: a consumer is sending it at the speed it had: 409, to be asked again once
  it is submitted.
- ``submitted`` (at the executor, not yet mined): the executor's replace, at the relayer that
  has it: the same transaction (its id, its nonce) sent again at the new speed, priced anew;
  the executor's id stays, its hash changes once the replacement is sent, and the status's
  hash follows the executor's (webhooks, the tracker). 200 with the executor's answer.
- ``mined`` or final, or a cancel under way: 409 naming why.

The spend policy judges the new speed as it judges a new transaction's (``speeds``,
``maxFeeWei``); a client with a daily fee budget cannot raise a transaction's fee above what
was reserved for it at accept (refused naming ``dailyFeeWei``): the budget stays exact.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass
from typing import Any

from relay_api.auth.service import Caller
from relay_api.deps import unit_of_work
from relay_api.relay import repository, requests, service
from relay_api.relay.cancel import write_through
from relay_api.relay.schemas import Speed
from relay_api.runtime import Runtime
from relay_core import policy
from relay_core.db.models import Transaction
from relay_core.db.transitions import touch
from relay_core.errors import Conflict, NotFound, Unavailable
from relay_core.executor import ErrorKind, ExecutorError
from relay_core.payload import executor_payload
from relay_core.queue import TransactionMessage
from relay_core.statuses import TxStatus, TxType

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SpeedUpAnswer:
    status: str
    speed: str
    speed_up: str  # done (before sending) | sent (replaced at the executor)
    hash: str | None
    detail: str

    def body(self, transaction_id: str) -> dict[str, Any]:
        return {
            "transactionId": transaction_id,
            "status": self.status,
            "speed": self.speed,
            "speedUp": self.speed_up,
            "hash": self.hash,
            "detail": self.detail,
        }


async def speed_up(
    runtime: Runtime, caller: Caller, transaction_id: str, speed: Speed
) -> SpeedUpAnswer:
    for _ in range(5):
        async with unit_of_work(runtime) as uow:
            tx = await repository.by_id(uow.session, transaction_id)
            if tx is None or tx.client_id != caller.id:
                raise NotFound("no transaction with this id")
            _check_allowed(tx)
            request = {**tx.request, "speed": speed.value}
            await _check_policy(runtime, caller, tx, request)
            if tx.status == TxStatus.pending:
                lane = _lane(runtime, tx, speed)
                moved = lane != tx.lane
                if not await touch(uow.session, tx, request=request, lane=lane):
                    continue  # moved meanwhile (a consumer's claim): decide again
                if moved:
                    uow.outbox.append(TransactionMessage.new(tx.id, tx.type, None, lane))
                uow.after_commit.append(functools.partial(write_through, runtime, tx))
                return SpeedUpAnswer(
                    tx.status, speed.value, "done", None, f"it will be sent at {speed.value}"
                )
        return await _at_executor(runtime, tx, request, speed)
    raise Conflict("the transaction kept moving; ask again")


def _check_allowed(tx: Transaction) -> None:
    status = TxStatus(tx.status)
    if tx.cancel_requested_at is not None or status is TxStatus.canceled:
        raise Conflict(f"the transaction is {tx.status} with a cancel under way: nothing to speed")
    if status is TxStatus.processing:
        raise Conflict("a consumer is sending it now at its speed: ask again once it is submitted")
    if status not in (TxStatus.pending, TxStatus.submitted):
        raise Conflict(f"the transaction is {tx.status}: too late to speed it up")


async def _check_policy(
    runtime: Runtime, caller: Caller, tx: Transaction, request: dict[str, Any]
) -> None:
    spend = await service.spend_of(
        caller, tx.type, request, runtime.fees, runtime.settings.forwarder_gas_overhead
    )
    caller.policy.check(spend)
    if caller.policy.daily_fee_wei and (spend.fee or 0) > int(tx.reserved_fee_wei or 0):
        raise policy.PolicyRefused(
            "dailyFeeWei",
            f"at {request['speed']} it could cost {spend.fee} wei in fees, more than the "
            f"{tx.reserved_fee_wei or 0} reserved for it when it was accepted",
        )


def _lane(runtime: Runtime, tx: Transaction, speed: Speed) -> str:
    if tx.type == TxType.direct and requests.takes_fast_lane(speed, runtime.settings):
        return "fast"
    return tx.lane


async def _at_executor(
    runtime: Runtime, tx: Transaction, request: dict[str, Any], speed: Speed
) -> SpeedUpAnswer:
    assert tx.executor_tx_id is not None
    payload = executor_payload(tx, runtime.settings.forwarder_gas_overhead, request)
    try:
        answer = await asyncio.wait_for(
            runtime.executors.of(tx.relayer).replace(tx.executor_tx_id, payload),
            runtime.settings.executor_timeout_s,
        )
    except ExecutorError as exc:
        if exc.kind is ErrorKind.rejected:
            log.info("api.speed_up.too_late", extra={"transactionId": tx.id, "why": str(exc)})
            refreshed = await runtime.refresher.refresh(tx)
            now = refreshed.status if refreshed is not None else tx.status
            raise Conflict(
                f"the transaction is {now}: the executor can no longer replace it: {exc.message}"
            ) from None
        raise Unavailable(f"the executor did not take the speed-up ({exc}); ask again") from None
    except TimeoutError:
        raise Unavailable("the executor did not answer; ask again") from None
    async with unit_of_work(runtime) as uow:
        current = await repository.by_id(uow.session, tx.id)
        if current is not None and current.status == TxStatus.submitted:
            changes: dict[str, Any] = {"request": {**current.request, "speed": speed.value}}
            if answer.hash:
                changes["hash"] = answer.hash
            if await touch(uow.session, current, **changes):
                uow.after_commit.append(functools.partial(write_through, runtime, current))
    log.info(
        "api.speed_up.sent",
        extra={"transactionId": tx.id, "speed": speed.value, "hash": answer.hash},
    )
    return SpeedUpAnswer(
        TxStatus.submitted.value,
        speed.value,
        "sent",
        answer.hash,
        f"the executor sends it again at {speed.value}, at the same nonce: whichever of the "
        "two is mined is the transaction (its hash in the status follows)",
    )
