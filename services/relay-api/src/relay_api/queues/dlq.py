"""The dead-letter queue as an operator reads it: each message with its reason and the row of
its transaction beside it (``relay dlq list|show|redrive|purge`` and the admin endpoints).

Reading hides messages for a moment and shows them again (relay_core.dlq): nothing is taken
from the DLQ except by ``redrive`` and ``purge``. A purged message's row is not touched: rows
still waiting (never executed) are found by the reconciler and enqueued again, final ones
stay final.

A redrive sends each chosen message's transaction back to the work queue, exactly once, for
the consumer to decide afresh from its row, as from any redelivery (a claim is taken over only
once stale, an attempt in doubt is looked up at the executor before anything is sent). Only a
row still under way can be redriven: statuses move forward only, and a client told ``failed``
may already have sent the transaction again, so a final row (and a message with no row, or no
transaction at all) stays in the DLQ, with the reason. The reconciler's count of the row's
dead letters starts again.

Per message: the row is marked enqueued and committed, the message sent to the work queue, and
only then deleted from the DLQ, so a redrive cut short leaves a message in both queues at
worst (the consumer drops a second copy by the row), never in neither.

A redrive of everything, where the SQS server has StartMessageMoveTask (AWS, LocalStack) and
every message in the DLQ can be redriven, is one move task instead: the rows are made ready
first, then SQS moves the messages itself and the redrive waits for the task to complete.
Where it has not (ministack, moto), or some message must stay, it is the per-message path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from relay_core import audit, dlq
from relay_core.cache import StatusCache
from relay_core.db.models import Transaction, TransactionEvent, utcnow
from relay_core.db.transitions import touch
from relay_core.errors import BadRequest, NotFound, Unavailable
from relay_core.queue import TransactionMessage, send_batch
from relay_core.settings import InfraSettings
from relay_core.statuses import is_terminal
from relay_core.views import rfc3339, status_entry

log = logging.getLogger(__name__)


def lane_names(settings: InfraSettings, lane: str) -> tuple[str, str]:
    """The lane's (queue name, DLQ name); 400 for a lane this deployment does not have."""
    if lane not in settings.lanes():
        raise BadRequest(
            f"lane: {lane!r} is not a lane here (lanes: {', '.join(settings.lanes())})"
        )
    return settings.lane_queues(lane)


async def dlq_url(sqs: Any, settings: InfraSettings, lane: str = "normal") -> str:
    name = lane_names(settings, lane)[1]
    return str((await sqs.get_queue_url(QueueName=name))["QueueUrl"])


async def listing(
    session: AsyncSession, sqs: Any, settings: InfraSettings, limit: int, lane: str = "normal"
) -> dict[str, Any]:
    """Up to ``limit`` dead letters of a lane, oldest first as SQS hands them out, with their
    rows."""
    url = await dlq_url(sqs, settings, lane)
    letters = await _look(sqs, url, limit=limit)
    rows = await _rows(session, [le.transaction_id for le in letters if le.transaction_id])
    depth = (await sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"]))["Attributes"]
    return {
        "queue": lane_names(settings, lane)[1],
        "depth": int(depth.get("ApproximateNumberOfMessages", 0))
        + int(depth.get("ApproximateNumberOfMessagesNotVisible", 0)),
        "messages": [_view(le, rows.get(le.transaction_id or "")) for le in letters],
    }


async def show(
    session: AsyncSession, sqs: Any, settings: InfraSettings, ref: str, lane: str = "normal"
) -> dict[str, Any]:
    """One dead letter, by its message id or its transaction's id, with the row's history."""
    url = await dlq_url(sqs, settings, lane)
    letters = await _look(sqs, url, enough=lambda le: ref in (le.message_id, le.transaction_id))
    found = [le for le in letters if ref in (le.message_id, le.transaction_id)]
    if not found:
        name = lane_names(settings, lane)[1]
        raise NotFound(f"no message in {name} with message or transaction id {ref}")
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


async def redrive(
    sessions: async_sessionmaker[AsyncSession],
    sqs: Any,
    settings: InfraSettings,
    cache: StatusCache | None,
    refs: list[str] | None,
    by: audit.Actor,
    lane: str = "normal",
) -> dict[str, Any]:
    """Redrive the messages named by ``refs`` (message or transaction ids), or all of them
    (None), from a lane's DLQ back to its queue. Returns what was redriven and what was left,
    with why."""
    url = await dlq_url(sqs, settings, lane)
    queue_name = lane_names(settings, lane)[0]
    queue_url = str((await sqs.get_queue_url(QueueName=queue_name))["QueueUrl"])
    wanted = set(refs or ())
    letters = await dlq.read(sqs, url, hold_s=300, wait_s=1)
    if refs is None and letters and await _can_move(sqs, url):
        try:
            moved = await _redrive_by_move_task(sessions, sqs, cache, url, queue_url, letters)
        except BaseException:
            with contextlib.suppress(Exception):  # not hidden for minutes by a failed redrive
                await dlq.reveal(sqs, url, letters)
            raise
        if moved is not None:
            log.info(
                "dlq.redrive",
                extra={"by": by.name, "lane": lane, "redriven": len(moved), "how": "move task"},
            )
            result = {"redriven": moved, "left": [], "how": "move task"}
            await _audited(sessions, by, lane, refs, result)
            return result
    chosen = [le for le in letters if refs is None or {le.message_id, le.transaction_id} & wanted]
    others = [le for le in letters if le not in chosen]
    redriven: list[dict[str, Any]] = []
    left: list[dict[str, Any]] = []
    try:
        await dlq.reveal(sqs, url, others)
        ready: list[tuple[dlq.DeadLetter, Transaction]] = []
        for letter in chosen:
            tx, why = await _make_ready(sessions, cache, letter)
            if tx is None:
                left.append(
                    {
                        "messageId": letter.message_id,
                        "transactionId": letter.transaction_id,
                        "why": why,
                    }
                )
            else:
                ready.append((letter, tx))
        for start in range(0, len(ready), 10):
            batch = ready[start : start + 10]
            sent = await send_batch(
                sqs,
                queue_url,
                [TransactionMessage.new(tx.id, tx.type, lane=lane) for _, tx in batch],
            )
            done = [letter for letter, tx in batch if tx.id in sent]
            await _delete(sqs, url, done)
            redriven += [
                {"messageId": le.message_id, "transactionId": le.transaction_id} for le in done
            ]
            left += [
                {
                    "messageId": le.message_id,
                    "transactionId": le.transaction_id,
                    "why": "SQS did not take it; try again",
                }
                for le, tx in batch
                if tx.id not in sent
            ]
    finally:
        done_ids = {r["messageId"] for r in redriven}
        await dlq.reveal(sqs, url, [le for le in chosen if le.message_id not in done_ids])
    missing = sorted(
        wanted
        - {le.message_id for le in chosen}
        - {le.transaction_id for le in chosen if le.transaction_id}
    )
    left += [
        {"messageId": None, "transactionId": None, "why": f"{ref}: not in the DLQ"}
        for ref in missing
    ]
    log.info(
        "dlq.redrive",
        extra={"by": by.name, "lane": lane, "redriven": len(redriven), "left": len(left)},
    )
    result = {"redriven": redriven, "left": left, "how": "per message"}
    await _audited(sessions, by, lane, refs, result)
    return result


async def _audited(
    sessions: async_sessionmaker[AsyncSession],
    by: audit.Actor,
    lane: str,
    refs: list[str] | None,
    result: dict[str, Any],
) -> None:
    async with sessions() as session, session.begin():
        audit.record(
            session,
            by,
            "dlq.redrive",
            "dlq",
            target_name=lane,
            before={"asked": "all" if refs is None else refs[:100]},
            after={
                "redriven": len(result["redriven"]),
                "left": len(result["left"]),
                "how": result["how"],
            },
        )


async def _arn(sqs: Any, url: str) -> str:
    attributes = await sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    return str(attributes["Attributes"]["QueueArn"])


async def _can_move(sqs: Any, dlq_url: str) -> bool:
    """Whether the server has message move tasks (ministack and moto have not)."""
    try:
        await sqs.list_message_move_tasks(SourceArn=await _arn(sqs, dlq_url), MaxResults=1)
    except Exception:
        return False
    return True


async def _redrive_by_move_task(
    sessions: async_sessionmaker[AsyncSession],
    sqs: Any,
    cache: StatusCache | None,
    dlq_url: str,
    queue_url: str,
    letters: list[dlq.DeadLetter],
    timeout_s: float = 120.0,
) -> list[dict[str, Any]] | None:
    """Every message of the DLQ back to the work queue by one StartMessageMoveTask, once each
    row has been made ready. None (nothing moved; the messages still held by this redrive)
    when one of them cannot be redriven: then the per-message path leaves it with its
    reason."""
    ids = [letter.transaction_id for letter in letters]
    if None in ids:
        return None
    async with sessions() as session:
        rows = await _rows(session, [tx_id for tx_id in ids if tx_id is not None])
    if any(tx_id not in rows or is_terminal(rows[tx_id]["status"]) for tx_id in ids):
        return None
    for letter in letters:
        tx, _ = await _make_ready(sessions, cache, letter)
        if tx is None:  # became final meanwhile: the per-message path says so
            return None
    # SQS moves only visible messages: show them again, then move them all.
    await dlq.reveal(sqs, dlq_url, letters)
    source = await _arn(sqs, dlq_url)
    destination = await _arn(sqs, queue_url)
    await sqs.start_message_move_task(SourceArn=source, DestinationArn=destination)
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        # A source queue has one move task at a time; the newest is listed first.
        task = (await sqs.list_message_move_tasks(SourceArn=source, MaxResults=1))["Results"][0]
        if task["Status"] == "COMPLETED":
            break
        if task["Status"] in ("FAILED", "CANCELLED"):
            why = task.get("FailureReason") or "no reason given"
            raise Unavailable(f"the DLQ move task ended {task['Status']}: {why}")
        if asyncio.get_running_loop().time() > deadline:
            raise Unavailable("the DLQ move task did not complete in time; it goes on in SQS")
        await asyncio.sleep(0.5)
    return [{"messageId": le.message_id, "transactionId": le.transaction_id} for le in letters]


async def _make_ready(
    sessions: async_sessionmaker[AsyncSession],
    cache: StatusCache | None,
    letter: dlq.DeadLetter,
) -> tuple[Transaction | None, str]:
    """Mark the row enqueued again, for the consumer to decide afresh (see the module's
    docstring); (None, why) when it cannot be redriven."""
    if len(letter.transaction_ids) > 1:
        return None, (
            f"a packed message of {len(letter.transaction_ids)} transactions "
            f"({', '.join(letter.transaction_ids)}): the reconciler settles each of its rows"
        )
    if letter.transaction_id is None:
        return None, "not a transaction message"
    async with sessions() as session, session.begin():
        tx = await session.get(Transaction, letter.transaction_id, with_for_update=True)
        if tx is None:
            return None, "no such transaction"
        if is_terminal(tx.status):
            return None, (
                f"final: {tx.status} ({tx.error or 'no error'}); a final transaction is not "
                "run again (its client sends it anew)"
            )
        await touch(session, tx, enqueued_at=utcnow(), dead_letters=0)
    if cache is not None:
        await cache.put_quietly(tx.id, tx.version, status_entry(tx), terminal=False)
    return tx, ""


async def _delete(sqs: Any, url: str, letters: list[dlq.DeadLetter]) -> None:
    if letters:
        await sqs.delete_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": le.receipt_handle} for i, le in enumerate(letters)
            ],
        )


async def purge(
    sqs: Any, settings: InfraSettings, confirm: str | None, lane: str = "normal"
) -> int:
    """Delete every message of a lane's DLQ; ``confirm`` must name it. Returns how many it
    held."""
    name = lane_names(settings, lane)[1]
    if confirm != name:
        raise BadRequest(f"confirm: name the queue to purge ({name})")
    url = await dlq_url(sqs, settings, lane)
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
        letters = await dlq.read(sqs, url, hold_s=30, wait_s=1, **how)
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
