"""A client's cancel carried out at the executor, for a transaction a consumer held when it was
asked for (``cancel_requested_at``, written by the API's ``DELETE``): the consumer that records
the executor's id cancels it there at once; the tracker asks again for any still standing.

The executor cancels a ``pending`` transaction at once and replaces a sent or submitted one
with a no-op at its nonce; either way its webhooks and the tracker bring the outcome
(``canceled``, or ``confirmed`` if the original was mined first). The request is cleared once
the executor has taken the cancel, or has refused it because the transaction is past canceling
(mined, or final); an executor that does not answer leaves it for the next look. Either end
is a step the client is told of (``transaction.cancel_sent`` or ``transaction.cancel_refused``:
an event and a callback, written with the clearing).
"""

from __future__ import annotations

import logging

from queue_consumer.circuit import CircuitOpen
from queue_consumer.pool import Member
from queue_consumer.transactions.group_commit import GroupCommit
from relay_core.db.models import Transaction
from relay_core.db.transitions import Change
from relay_core.executor import ErrorKind, ExecutorError
from relay_core.statuses import CancelStep

log = logging.getLogger(__name__)


async def carry_out(tx: Transaction, member: Member, writes: GroupCommit, timeout_s: float) -> bool:
    """Cancel ``tx`` (its executor id recorded, a cancel requested) at ``member``, the relayer
    that has it; True once the request is settled (sent, or too late) and cleared."""
    assert tx.executor_tx_id is not None
    try:
        async with member.guard.slot() as permit:
            answer = await permit.run(member.client.cancel(tx.executor_tx_id), timeout_s=timeout_s)
        step, outcome = CancelStep.sent, f"cancel sent: the executor has it {answer.status}"
    except (ExecutorError, CircuitOpen, TimeoutError) as exc:
        if not (isinstance(exc, ExecutorError) and exc.kind is ErrorKind.rejected):
            log.warning(
                "consumer.cancel.unanswered", extra={"transactionId": tx.id, "error": repr(exc)}
            )
            return False
        # Mined or final at the executor: the original goes on.
        step, outcome = CancelStep.refused, f"cancel too late: {exc.message}"
    log.info("consumer.cancel.carried_out", extra={"transactionId": tx.id, "outcome": outcome})
    # A touch: the status follows from the executor (webhooks, the tracker). Should the row
    # have moved meanwhile the request stays, and the tracker's next look asks again: a second
    # cancel cannot make the original execute (at most the executor prices its no-op again).
    return await writes.write(
        Change(
            tx,
            tx.status,
            source="consumer",
            reason=outcome,
            step=step,
            values={"cancel_requested_at": None},
        )
    )
