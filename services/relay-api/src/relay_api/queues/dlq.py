"""The dead-letter queue as an operator reads it: each message with its reason and the row of
its transaction beside it (``relay dlq list|show|purge`` and the admin endpoints alike).

Reading hides messages for a moment and shows them again (relay_core.dlq): nothing is taken
from the DLQ except by ``purge``. A purged message's row is not touched: rows still waiting
(never executed) are found by the reconciler and enqueued again, final ones stay final.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from relay_core import dlq
from relay_core.db.models import Transaction, TransactionEvent
from relay_core.errors import BadRequest, NotFound
from relay_core.settings import InfraSettings
from relay_core.views import rfc3339


async def dlq_url(sqs: Any, settings: InfraSettings) -> str:
    return str((await sqs.get_queue_url(QueueName=settings.dlq_name))["QueueUrl"])


async def listing(
    session: AsyncSession, sqs: Any, settings: InfraSettings, limit: int
) -> dict[str, Any]:
    """Up to ``limit`` dead letters, oldest first as SQS hands them out, with their rows."""
    url = await dlq_url(sqs, settings)
    letters = await _look(sqs, url, limit=limit)
    rows = await _rows(session, [le.transaction_id for le in letters if le.transaction_id])
    depth = (await sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"]))["Attributes"]
    return {
        "queue": settings.dlq_name,
        "depth": int(depth.get("ApproximateNumberOfMessages", 0))
        + int(depth.get("ApproximateNumberOfMessagesNotVisible", 0)),
        "messages": [_view(le, rows.get(le.transaction_id or "")) for le in letters],
    }


async def show(
    session: AsyncSession, sqs: Any, settings: InfraSettings, ref: str
) -> dict[str, Any]:
    """One dead letter, by its message id or its transaction's id, with the row's history."""
    url = await dlq_url(sqs, settings)
    letters = await _look(sqs, url, enough=lambda le: ref in (le.message_id, le.transaction_id))
    found = [le for le in letters if ref in (le.message_id, le.transaction_id)]
    if not found:
        raise NotFound(f"no message in {settings.dlq_name} with message or transaction id {ref}")
    letter = found[0]
    view = _view(letter, None)
    view["body"] = letter.body
    if letter.transaction_id:
        rows = await _rows(session, [letter.transaction_id])
        view["transaction"] = rows.get(letter.transaction_id)
        events = await session.scalars(
            select(TransactionEvent)
            .where(TransactionEvent.transaction_id == letter.transaction_id)
            .order_by(TransactionEvent.id)
        )
        view["events"] = [
            {
                "at": rfc3339(e.created_at),
                "from": e.from_status,
                "to": e.to_status,
                "source": e.source,
                "reason": e.reason,
            }
            for e in events
        ]
    return view


async def purge(sqs: Any, settings: InfraSettings, confirm: str | None) -> int:
    """Delete every message of the DLQ; ``confirm`` must name it. Returns how many it held."""
    if confirm != settings.dlq_name:
        raise BadRequest(f"confirm: name the queue to purge ({settings.dlq_name})")
    url = await dlq_url(sqs, settings)
    depth = (await sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"]))["Attributes"]
    held = int(depth.get("ApproximateNumberOfMessages", 0)) + int(
        depth.get("ApproximateNumberOfMessagesNotVisible", 0)
    )
    await sqs.purge_queue(QueueUrl=url)
    return held


async def _look(sqs: Any, url: str, **how: Any) -> list[dlq.DeadLetter]:
    """Read (relay_core.dlq.read) and show again at once."""
    letters: list[dlq.DeadLetter] = []
    try:
        letters = await dlq.read(sqs, url, hold_s=30, **how)
    finally:
        await dlq.reveal(sqs, url, letters)
    return letters


async def _rows(session: AsyncSession, ids: list[str]) -> dict[str, dict[str, Any]]:
    if not ids:
        return {}
    found = await session.scalars(select(Transaction).where(Transaction.id.in_(set(ids))))
    return {
        tx.id: {
            "id": tx.id,
            "clientId": tx.client_id,
            "type": tx.type,
            "status": tx.status,
            "error": tx.error,
            "attempts": tx.attempts,
            "executorTxId": tx.executor_tx_id,
            "createdAt": rfc3339(tx.created_at),
            "updatedAt": rfc3339(tx.updated_at),
        }
        for tx in found
    }


def _view(letter: dlq.DeadLetter, row: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "messageId": letter.message_id,
        "transactionId": letter.transaction_id,
        "kind": letter.kind,
        "reason": letter.why,
        "receiveCount": letter.receive_count,
        "deadLetteredAt": rfc3339(letter.sent_at.replace(tzinfo=None)) if letter.sent_at else None,
        "transaction": row,
    }
