"""The SQS contract between relay-api (producer) and queue-consumer, and the client for it.

Message body, one transaction (``schemaVersion`` 1)::

    {"schemaVersion": 1, "messageId": "<uuid>", "transactionId": "<uuid>",
     "type": "direct"|"gasless", "timestamp": "<RFC 3339 UTC>"}

or several transactions of one request, packed (``schemaVersion`` 2: a batch's, at most
:data:`MOST_PER_MESSAGE`, all of one type)::

    {"schemaVersion": 2, "messageId": "<uuid>", "transactionIds": ["<uuid>", ...],
     "type": "direct"|"gasless", "timestamp": "<RFC 3339 UTC>"}

The body names the transactions; the consumer reloads each row and decides from it, never from
the message. The same fields are repeated as message attributes for routing and tracing (a
packed message has no ``transactionId`` attribute), with the accepting request's
``requestId`` and W3C ``traceparent`` when it had them (``relay_core.tracing``).

Why pack: SQS takes at most 10 messages per SendMessageBatch, so a batch of 100 transactions
sent one per message costs ten calls, each an HTTP request, a signature and an answer to
parse — a third of the API's CPU for the batch (docs/performance.md, issue 30) and ten times
the SQS requests billed. Packed ten to a message, it is one call, one receive and one delete.
The consumer unpacks a message into one piece of work per transaction; what is left to do
for one of them (a back-off, a requeue, a dead letter) goes on in a message of its own
(schema version 1), and the packed message is deleted once every transaction in it is
settled (queue_consumer.stages.packed).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiobotocore.session import get_session
from botocore.config import Config

from relay_core import ids, jsonutil
from relay_core.settings import InfraSettings
from relay_core.statuses import TxType
from relay_core.tracing import Trace

SCHEMA_VERSION = 1
PACKED_SCHEMA_VERSION = 2
# Transactions per packed message: a batch of 100 in ten messages, one SendMessageBatch.
MOST_PER_MESSAGE = 10


# Shared by every message's attributes (plain dicts: orjson and botocore take no other
# mapping); nothing changes them.
_SCHEMA_VERSION_ATTRIBUTE = {"DataType": "Number", "StringValue": str(SCHEMA_VERSION)}
_TYPE_ATTRIBUTES = {
    tx_type: {"DataType": "String", "StringValue": tx_type.value} for tx_type in TxType
}
_PACKED_VERSION_ATTRIBUTE = {"DataType": "Number", "StringValue": str(PACKED_SCHEMA_VERSION)}


class PoisonMessage(ValueError):
    """A message that can never be processed: unparseable or of an unknown schema."""


@dataclass(frozen=True, slots=True)
class TransactionMessage:
    transaction_id: str
    type: TxType
    message_id: str
    timestamp: str
    request_id: str | None = None
    traceparent: str | None = None
    lane: str = "normal"  # which queue carries it (not in the body: the row knows its lane)

    @classmethod
    def new(
        cls,
        transaction_id: str,
        tx_type: TxType | str,
        trace: Trace | None = None,
        lane: str = "normal",
        *,
        timestamp: str | None = None,
    ) -> TransactionMessage:
        """``timestamp``: RFC 3339 in UTC with a Z (now when not given: a batch gives its
        rows' creation time to all of its messages)."""
        if timestamp is None:
            timestamp = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        return cls(
            transaction_id=transaction_id,
            type=TxType(tx_type),
            message_id=ids.uuid4(),
            timestamp=timestamp,
            request_id=None if trace is None else trace.request_id,
            traceparent=None if trace is None else trace.traceparent,
            lane=lane,
        )

    @classmethod
    def many(
        cls,
        transaction_ids: Sequence[str],
        tx_type: TxType,
        trace: Trace | None,
        lanes: Sequence[str],
        *,
        timestamp: str,
    ) -> list[TransactionMessage]:
        """:meth:`new` for each of a batch's transactions, of one type and one request (its
        trace and timestamp), on ``lanes``: the message ids from one read of the random
        source, the trace's values worked out once."""
        kind = TxType(tx_type)
        request_id = None if trace is None else trace.request_id
        traceparent = None if trace is None else trace.traceparent
        return [
            cls(transaction_id, kind, message_id, timestamp, request_id, traceparent, lane)
            for transaction_id, message_id, lane in zip(
                transaction_ids, ids.uuid4_many(len(transaction_ids)), lanes, strict=True
            )
        ]

    def body(self) -> str:
        return jsonutil.dumps(
            {
                "schemaVersion": SCHEMA_VERSION,
                "messageId": self.message_id,
                "transactionId": self.transaction_id,
                "type": self.type.value,
                "timestamp": self.timestamp,
            }
        )

    def attributes(self) -> dict[str, Any]:
        """The message attributes (the same values as the body's, for filters and tracing)."""
        attributes = {
            "schemaVersion": _SCHEMA_VERSION_ATTRIBUTE,
            "transactionId": {"DataType": "String", "StringValue": self.transaction_id},
            "type": _TYPE_ATTRIBUTES[self.type],
        }
        if self.request_id is not None:
            attributes["requestId"] = {"DataType": "String", "StringValue": self.request_id}
        if self.traceparent is not None:
            attributes["traceparent"] = {"DataType": "String", "StringValue": self.traceparent}
        return attributes

    @classmethod
    def parse(cls, body: str) -> list[TransactionMessage]:
        """The transactions a body names: one (schema version 1) or a packed message's
        (version 2, in its order, sharing its ``messageId``, type and timestamp)."""
        try:
            data = jsonutil.loads(body)
        except ValueError as exc:
            raise PoisonMessage("body is not JSON") from exc
        if not isinstance(data, dict):
            raise PoisonMessage("body is not a JSON object")
        version = data.get("schemaVersion")
        if version not in (SCHEMA_VERSION, PACKED_SCHEMA_VERSION):
            raise PoisonMessage(f"unknown schemaVersion {version!r}")
        try:
            if version == SCHEMA_VERSION:
                named = [data["transactionId"]]
            else:
                named = data["transactionIds"]
                if not isinstance(named, list) or not 1 <= len(named) <= MOST_PER_MESSAGE:
                    raise ValueError(
                        f"transactionIds must be a list of 1-{MOST_PER_MESSAGE} transaction ids"
                    )
            transaction_ids = [str(uuid.UUID(str(name))) for name in named]
            if len(set(transaction_ids)) != len(transaction_ids):
                raise ValueError("transactionIds names a transaction twice")
            kind = TxType(data["type"])
            message_id, timestamp = str(data["messageId"]), str(data["timestamp"])
        except (KeyError, ValueError) as exc:
            raise PoisonMessage(f"missing or invalid field: {exc}") from exc
        return [cls(tx_id, kind, message_id, timestamp) for tx_id in transaction_ids]


def pack(messages: Sequence[TransactionMessage]) -> list[list[TransactionMessage]]:
    """``messages`` (of one lane) as the messages to send: runs of one request's transactions
    (the same type, trace and timestamp: a batch's) packed up to :data:`MOST_PER_MESSAGE` to
    a message, every other one alone. The order is kept."""
    packed: list[list[TransactionMessage]] = []
    for message in messages:
        last = packed[-1] if packed else None
        if (
            last is not None
            and len(last) < MOST_PER_MESSAGE
            and _same_request(last[0], message)
            and message.request_id is not None  # a request's (a batch's), not the sweeper's
        ):
            last.append(message)
        else:
            packed.append([message])
    return packed


def _same_request(one: TransactionMessage, other: TransactionMessage) -> bool:
    return (one.type, one.request_id, one.traceparent, one.timestamp) == (
        other.type,
        other.request_id,
        other.traceparent,
        other.timestamp,
    )


def packed_entry(index: int, messages: Sequence[TransactionMessage]) -> dict[str, Any]:
    """The SendMessageBatch entry of one message carrying ``messages`` (:func:`pack`'s): a
    single one's own body, several in one packed body."""
    first = messages[0]
    if len(messages) == 1:
        return {
            "Id": str(index),
            "MessageBody": first.body(),
            "MessageAttributes": first.attributes(),
        }
    body = jsonutil.dumps(
        {
            "schemaVersion": PACKED_SCHEMA_VERSION,
            "messageId": first.message_id,
            "transactionIds": [message.transaction_id for message in messages],
            "type": first.type.value,
            "timestamp": first.timestamp,
        }
    )
    attributes = first.attributes()
    del attributes["transactionId"]
    attributes["schemaVersion"] = _PACKED_VERSION_ATTRIBUTE
    return {"Id": str(index), "MessageBody": body, "MessageAttributes": attributes}


def trace_attributes(message: dict[str, Any]) -> tuple[str | None, str | None]:
    """The ``requestId`` and ``traceparent`` a received message carries (None when absent)."""
    attributes = message.get("MessageAttributes") or {}

    def value(name: str) -> str | None:
        found = attributes.get(name)
        return str(found.get("StringValue")) if isinstance(found, dict) else None

    return value("requestId"), value("traceparent")


def client_config(settings: InfraSettings, *, timeout_s: float = 5.0, retries: int = 2) -> Config:
    return Config(
        region_name=settings.aws_region,
        connect_timeout=timeout_s,
        read_timeout=max(timeout_s, 25.0),  # long polls wait up to 20 s
        retries={"max_attempts": retries, "mode": "standard"},
        max_pool_connections=50,
    )


@contextlib.asynccontextmanager
async def sqs_client(*, wire: bool = False, **kwargs: Any) -> AsyncIterator[Any]:
    """An SQS client (aiobotocore), used as ``async with sqs_client(...) as sqs``. With
    ``wire``, its three hot calls (send and delete batches, receive) go out through
    :class:`relay_wire.sqswire.SqsWire` instead, at a fraction of the CPU."""
    session = get_session()
    async with session.create_client("sqs", **kwargs) as client:
        if not wire:
            yield client
            return
        from relay_wire.sqswire import SqsWire

        async with SqsWire.around(client, session) as fast:
            yield fast


def sqs_client_kwargs(settings: InfraSettings) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"region_name": settings.aws_region}
    if settings.aws_endpoint_url:
        kwargs["endpoint_url"] = settings.aws_endpoint_url
        # Local emulators accept any credentials; do not require the operator to invent some.
        kwargs.setdefault("aws_access_key_id", "test")
        kwargs.setdefault("aws_secret_access_key", "test")
    return kwargs


async def create_queues(sqs: Any, settings: InfraSettings) -> tuple[str, str]:
    """Create every lane's queue and DLQ with the redrive policy; return the normal lane's
    (queue URL, DLQ URL). Safe to run again."""
    created = {}
    for lane in settings.lanes():
        created[lane] = await create_lane(sqs, settings, lane)
    return created["normal"]


async def lane_urls(sqs: Any, settings: InfraSettings) -> dict[str, tuple[str, str]]:
    """Each lane's (queue URL, DLQ URL); raises when a queue does not exist."""
    urls = {}
    for lane in settings.lanes():
        queue_name, dlq_name = settings.lane_queues(lane)
        urls[lane] = (
            str((await sqs.get_queue_url(QueueName=queue_name))["QueueUrl"]),
            str((await sqs.get_queue_url(QueueName=dlq_name))["QueueUrl"]),
        )
    return urls


async def create_lane(sqs: Any, settings: InfraSettings, lane: str) -> tuple[str, str]:
    """One lane's work queue and its DLQ, with the redrive policy between them."""
    queue_name, dlq_name = settings.lane_queues(lane)
    dlq_url = (
        await sqs.create_queue(
            QueueName=dlq_name,
            Attributes={"MessageRetentionPeriod": str(14 * 24 * 3600)},
        )
    )["QueueUrl"]
    dlq_arn = (await sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"]))[
        "Attributes"
    ]["QueueArn"]
    attributes = {
        "VisibilityTimeout": str(settings.queue_visibility_timeout_s),
        "MessageRetentionPeriod": str(settings.queue_retention_s),
        "ReceiveMessageWaitTimeSeconds": "20",
        "RedrivePolicy": jsonutil.dumps(
            {
                "deadLetterTargetArn": dlq_arn,
                "maxReceiveCount": str(settings.queue_max_receive_count),
            }
        ),
    }
    queue_url = (await sqs.create_queue(QueueName=queue_name))["QueueUrl"]
    # create_queue does not change an existing queue's attributes; set them explicitly.
    await sqs.set_queue_attributes(QueueUrl=queue_url, Attributes=attributes)
    return queue_url, dlq_url


DEPTH_ATTRIBUTES = {
    "ApproximateNumberOfMessages": "visible",
    "ApproximateNumberOfMessagesNotVisible": "inFlight",
    "ApproximateNumberOfMessagesDelayed": "delayed",
}


async def depths(sqs: Any, settings: InfraSettings) -> dict[str, dict[str, int] | str]:
    """Each lane's queue and DLQ message counts (SQS's approximate ones), or why not: keys
    ``queue`` and ``dlq`` for the normal lane, ``fast`` and ``fast-dlq`` for the fast one."""
    found: dict[str, dict[str, int] | str] = {}
    for lane in settings.lanes():
        queue_name, dlq_name = settings.lane_queues(lane)
        roles = ("queue", "dlq") if lane == "normal" else (lane, f"{lane}-dlq")
        for role, name in zip(roles, (queue_name, dlq_name), strict=True):
            try:
                url = (await sqs.get_queue_url(QueueName=name))["QueueUrl"]
                attributes = (
                    await sqs.get_queue_attributes(
                        QueueUrl=url, AttributeNames=list(DEPTH_ATTRIBUTES)
                    )
                )["Attributes"]
            except Exception as exc:
                found[role] = f"unavailable: {type(exc).__name__}: {str(exc)[:200]}"
                continue
            found[role] = {
                label: int(attributes.get(attribute, 0))
                for attribute, label in DEPTH_ATTRIBUTES.items()
            }
    return found


async def send_batch(sqs: Any, queue_url: str, messages: Sequence[TransactionMessage]) -> set[str]:
    """Send up to 10 messages in one call, each its own; return the transaction ids that SQS
    accepted."""
    return await send_packed(sqs, queue_url, [[message] for message in messages])


async def send_packed(
    sqs: Any, queue_url: str, packed: Sequence[Sequence[TransactionMessage]]
) -> set[str]:
    """Send up to 10 messages (:func:`pack`'s) in one call; return the transaction ids that
    SQS accepted (a packed message's all, or none of them)."""
    if not packed:
        return set()
    entries = [packed_entry(index, messages) for index, messages in enumerate(packed)]
    response = await sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
    return {
        message.transaction_id
        for entry in response.get("Successful", [])
        for message in packed[int(entry["Id"])]
    }
