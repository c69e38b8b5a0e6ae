"""Reading the dead-letter queue without taking anything from it.

SQS has no "peek": a message is read by receiving it, which hides it for a while. So the DLQ
is read in batches, each message hidden for ``hold_s`` while the reading goes on (so the next
batch brings new ones), and everything read is made visible again at the end (:func:`reveal`),
whoever reads: the reconciler looking for its rows' messages, or an operator's
``relay dlq list``. A DLQ has no redrive policy of its own, so the receive counts this moves
mean nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from relay_core.queue import PoisonMessage, TransactionMessage

log = logging.getLogger(__name__)

SCAN_LIMIT = 10_000


@dataclass(frozen=True, slots=True)
class DeadLetter:
    message_id: str
    receipt_handle: str
    body: str
    # The transactions its body names: one; several for a packed message (moved here by the
    # redrive policy: the consumer dead-letters transactions one to a message); none when the
    # body is not a transaction message.
    transaction_ids: tuple[str, ...]
    kind: str | None  # deadLetterKind; None: moved by SQS's redrive (consumers died on it)
    reason: str | None
    receive_count: int | None  # receives before it was dead-lettered, where known
    sent_at: datetime | None  # when it entered the DLQ

    @classmethod
    def of(cls, message: dict[str, Any]) -> DeadLetter:
        attributes = message.get("MessageAttributes") or {}

        def attribute(name: str) -> str | None:
            value = attributes.get(name, {}).get("StringValue")
            return str(value) if value is not None else None

        try:
            named = tuple(
                m.transaction_id for m in TransactionMessage.parse(message.get("Body", ""))
            )
        except PoisonMessage:
            named = ()
        count = attribute("receiveCount")
        sent = (message.get("Attributes") or {}).get("SentTimestamp")
        return cls(
            message_id=str(message["MessageId"]),
            receipt_handle=str(message["ReceiptHandle"]),
            body=str(message.get("Body", "")),
            transaction_ids=named,
            kind=attribute("deadLetterKind"),
            reason=attribute("deadLetterReason"),
            receive_count=int(count) if count is not None else None,
            sent_at=datetime.fromtimestamp(int(sent) / 1000, UTC) if sent else None,
        )

    @property
    def transaction_id(self) -> str | None:
        """The one transaction it names; None for a packed message or none at all."""
        return self.transaction_ids[0] if len(self.transaction_ids) == 1 else None

    @property
    def why(self) -> str:
        """The reason as one line, for logs and rows."""
        if self.kind is None:
            return "moved by the queue's redrive policy (consumers died on it)"
        return f"{self.kind}: {self.reason or '-'}"


async def read(
    sqs: Any,
    dlq_url: str,
    *,
    limit: int = SCAN_LIMIT,
    hold_s: int = 60,
    wait_s: int = 0,
    enough: Callable[[DeadLetter], bool] | None = None,
) -> list[DeadLetter]:
    """Up to ``limit`` distinct messages of the DLQ, each hidden for ``hold_s``; stops early
    when ``enough`` says so of one. The caller must :func:`reveal` them (or delete them).
    ``wait_s``: the long poll of each receive. A short poll (0) may answer nothing while
    messages are there (SQS samples its servers): an operator's listing waits a second before
    it believes "no more"."""
    letters: list[DeadLetter] = []
    seen: set[str] = set()
    while len(letters) < limit:
        response = await sqs.receive_message(
            QueueUrl=dlq_url,
            MaxNumberOfMessages=min(10, limit - len(letters)),
            WaitTimeSeconds=wait_s,
            VisibilityTimeout=hold_s,
            AttributeNames=["SentTimestamp"],
            MessageAttributeNames=["All"],
        )
        fresh = [m for m in response.get("Messages", []) if m["MessageId"] not in seen]
        if not fresh:
            break
        done = False
        for message in fresh:  # all of them: each is hidden now, and must be revealed
            seen.add(message["MessageId"])
            letter = DeadLetter.of(message)
            letters.append(letter)
            done = done or (enough is not None and enough(letter))
        if done:
            break
    return letters


async def reveal(sqs: Any, dlq_url: str, letters: Sequence[DeadLetter]) -> None:
    """Make what :func:`read` hid visible again (deleted ones are simply not found)."""
    for start in range(0, len(letters), 10):
        entries = [
            {"Id": str(i), "ReceiptHandle": letter.receipt_handle, "VisibilityTimeout": 0}
            for i, letter in enumerate(letters[start : start + 10])
        ]
        try:
            await sqs.change_message_visibility_batch(QueueUrl=dlq_url, Entries=entries)
        except Exception as exc:  # they reappear when their hold ends anyway
            log.info("dlq.reveal_failed", extra={"error": str(exc)[:200]})
