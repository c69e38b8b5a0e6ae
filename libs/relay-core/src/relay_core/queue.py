"""The SQS contract between relay-api (producer) and queue-consumer, and the client for it.

Message body (``schemaVersion`` 1)::

    {"schemaVersion": 1, "messageId": "<uuid>", "transactionId": "<uuid>",
     "type": "direct"|"gasless", "timestamp": "<RFC 3339 UTC>"}

The body names the transaction; the consumer reloads the row and decides from it, never from
the message. The same fields are repeated as message attributes for routing and tracing, with
the accepting request's ``requestId`` and W3C ``traceparent`` when it had them
(``relay_core.tracing``).
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


# Shared by every message's attributes (plain dicts: orjson and botocore take no other
# mapping); nothing changes them.
_SCHEMA_VERSION_ATTRIBUTE = {"DataType": "Number", "StringValue": str(SCHEMA_VERSION)}
_TYPE_ATTRIBUTES = {
    tx_type: {"DataType": "String", "StringValue": tx_type.value} for tx_type in TxType
}


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
    def parse(cls, body: str) -> TransactionMessage:
        try:
            data = jsonutil.loads(body)
        except ValueError as exc:
            raise PoisonMessage("body is not JSON") from exc
        if not isinstance(data, dict):
            raise PoisonMessage("body is not a JSON object")
        if data.get("schemaVersion") != SCHEMA_VERSION:
            raise PoisonMessage(f"unknown schemaVersion {data.get('schemaVersion')!r}")
        try:
            transaction_id = str(uuid.UUID(str(data["transactionId"])))
            return cls(
                transaction_id=transaction_id,
                type=TxType(data["type"]),
                message_id=str(data["messageId"]),
                timestamp=str(data["timestamp"]),
            )
        except (KeyError, ValueError) as exc:
            raise PoisonMessage(f"missing or invalid field: {exc}") from exc


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
    """Send up to 10 messages in one call; return the transaction ids that SQS accepted."""
    if not messages:
        return set()
    entries = [
        {
            "Id": str(index),
            "MessageBody": message.body(),
            "MessageAttributes": message.attributes(),
        }
        for index, message in enumerate(messages)
    ]
    response = await sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
    return {messages[int(entry["Id"])].transaction_id for entry in response.get("Successful", [])}
