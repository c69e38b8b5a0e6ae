"""Cancel: ``DELETE /api/v1/relay/transactions/{id}``, the caller's own transaction.

What is done depends on where the transaction is, read and written as a compare-and-set on
its version, so that a consumer's claim and a cancel never both win:

- ``pending`` (waiting for a consumer, held for its signer's nonce turn, or in a paused
  lane): ``canceled`` at once; no consumer will send it (a claim finds the row moved, and a
  message for a final row is let go). 200.
- ``processing`` (a consumer claimed it and is sending it): the consumer won; the request is
  written on the row (``cancel_requested_at``) and the consumer cancels it at the executor as
  soon as it has its id, or instead of sending it if its attempt sent nothing. 202.
- ``submitted`` (the executor has it, not yet mined): the executor's cancel, at the relayer
  that has it. The executor cancels a transaction it has not sent at once, and replaces a sent
  one with a no-op at its nonce: ``canceled`` once the no-op is mined, unless the original is
  mined first (then it goes on to ``confirmed``). 202 (200 if the executor canceled it at
  once). An executor that does not answer gets the request written on the row, as above, and
  the consumer's tracker asks it again.
- ``mined`` or final: too late, 409 naming the status.

A canceled gasless request gives up its signer's nonce turn only once the cancel is final.
Every step is an event, and a callback where the transaction has a callback URL: a status
change, or a step that changes none (``transaction.cancel_requested`` when the request is
written on the row, ``transaction.cancel_sent`` when the executor took it; the consumer writes
``cancel_sent`` or ``cancel_refused`` for a request it carries out).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from relay_api.auth.service import Caller
from relay_api.deps import unit_of_work
from relay_api.relay import repository
from relay_api.runtime import Runtime
from relay_core.db.models import Transaction, utcnow
from relay_core.db.transitions import transition
from relay_core.errors import NotFound
from relay_core.executor import ErrorKind, ExecutorError
from relay_core.statuses import CancelStep, TxStatus, is_terminal
from relay_core.tracking import apply_upstream, interpret

log = logging.getLogger(__name__)

SOURCE = "client"
CANCELED_BEFORE_SENT = "canceled by its client before it was sent"


@dataclass(frozen=True, slots=True)
class CancelAnswer:
    http_status: int
    status: str  # the transaction's, as it stands
    cancel: str  # done | requested | sent | too_late
    detail: str

    def body(self, transaction_id: str) -> dict[str, Any]:
        if self.cancel == "too_late":
            return {"error": "conflict", "detail": self.detail, "status": self.status}
        return {
            "transactionId": transaction_id,
            "status": self.status,
            "cancel": self.cancel,
            "detail": self.detail,
        }


async def cancel(runtime: Runtime, caller: Caller, transaction_id: str) -> CancelAnswer:
    for _ in range(5):
        async with unit_of_work(runtime) as uow:
            tx = await repository.by_id(uow.session, transaction_id)
            if tx is None or tx.client_id != caller.id:
                raise NotFound("no transaction with this id")
            status = TxStatus(tx.status)
            if status is TxStatus.pending:
                if await transition(
                    uow.session,
                    tx,
                    TxStatus.canceled,
                    source=SOURCE,
                    reason=CANCELED_BEFORE_SENT,
                    error=CANCELED_BEFORE_SENT,
                    inflight_key=None,
                    cancel_requested_at=None,
                ):
                    uow.after_commit.append(functools.partial(write_through, runtime, tx))
                    return CancelAnswer(200, "canceled", "done", CANCELED_BEFORE_SENT)
                continue  # moved meanwhile (a consumer's claim): decide again
            if status is TxStatus.processing:
                why = "a consumer is sending it"
                if tx.cancel_requested_at is None and not await _request(uow.session, tx, why):
                    continue
                return _requested(tx, why)
            if status is TxStatus.canceled:  # asked again: it is
                return CancelAnswer(200, tx.status, "done", tx.error or "canceled")
            if status is not TxStatus.submitted:
                return _too_late(tx)
            if tx.cancel_requested_at is not None:
                return _requested(tx, "it is on its way to the executor")
        return await _at_executor(runtime, tx)
    return CancelAnswer(
        409, "processing", "too_late", "the transaction kept moving; ask again for where it is"
    )


async def _at_executor(runtime: Runtime, tx: Transaction) -> CancelAnswer:
    assert tx.executor_tx_id is not None
    try:
        answer = await asyncio.wait_for(
            runtime.executors.of(tx.relayer).cancel(tx.executor_tx_id),
            runtime.settings.executor_timeout_s,
        )
    except (ExecutorError, TimeoutError) as exc:
        if isinstance(exc, ExecutorError) and exc.kind is ErrorKind.rejected:
            log.info("api.cancel.too_late", extra={"transactionId": tx.id, "why": str(exc)})
            # Mined at the executor already; the row may not know yet: it is brought up to date.
            refreshed = await runtime.refresher.refresh(tx)
            now = refreshed.status if refreshed is not None else tx.status
            return CancelAnswer(
                409, now, "too_late", f"the executor can no longer cancel it: {exc.message}"
            )
        log.warning("api.cancel.executor_unanswered", extra={"transactionId": tx.id})
        why = "the executor did not answer; it is asked again"
        async with unit_of_work(runtime) as uow:
            current = await repository.by_id(uow.session, tx.id)
            if current is not None and current.status == TxStatus.submitted:
                await _request(uow.session, current, why)
        return _requested(tx, why)
    log.info("api.cancel.sent", extra={"transactionId": tx.id, "executor": answer.status})
    view = interpret(answer.raw)
    if view is not None and is_terminal(view.status):  # canceled there and then (not sent)
        async with unit_of_work(runtime) as uow:
            current = await repository.by_id(uow.session, tx.id)
            if current is not None and await apply_upstream(
                uow.session, current, view, source=SOURCE
            ):
                uow.after_commit.append(functools.partial(write_through, runtime, current))
                return CancelAnswer(
                    200, current.status, "done", "the executor canceled it before sending it"
                )
    await _record_sent(runtime, tx.id, answer.status)
    return CancelAnswer(
        202,
        TxStatus.submitted.value,
        "sent",
        "the executor replaces it with a no-op at its nonce: canceled once that is mined, or "
        "confirmed if the original is mined first",
    )


async def _request(session: AsyncSession, tx: Transaction, why: str) -> bool:
    """The cancel written on the row, for whoever sends it to the executor: a step."""
    return await transition(
        session,
        tx,
        tx.status,
        source=SOURCE,
        reason=f"cancel requested: {why}",
        step=CancelStep.requested,
        cancel_requested_at=utcnow(),
    )


async def _record_sent(runtime: Runtime, transaction_id: str, executor_status: str) -> None:
    """The executor took the cancel: a step, on the row as it now stands (unless it is final
    already: the outcome came first, and says more)."""
    for _ in range(3):
        async with unit_of_work(runtime) as uow:
            current = await repository.by_id(uow.session, transaction_id)
            if current is None or is_terminal(current.status):
                return
            if await transition(
                uow.session,
                current,
                current.status,
                source=SOURCE,
                reason=f"cancel sent: the executor has it {executor_status}",
                step=CancelStep.sent,
            ):
                return


def _requested(tx: Transaction, why: str) -> CancelAnswer:
    return CancelAnswer(
        202,
        tx.status,
        "requested",
        f"{why}: the cancel goes to the executor as soon as it has it (or it is never sent)",
    )


def _too_late(tx: Transaction) -> CancelAnswer:
    return CancelAnswer(409, tx.status, "too_late", f"the transaction is {tx.status}: too late")


async def write_through(runtime: Runtime, tx: Transaction) -> None:
    """The row as it now stands into the status cache (after its commit)."""
    if runtime.cache is not None:
        await runtime.cache.put_row_quietly(tx)
