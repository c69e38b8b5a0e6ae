"""Bodies of the admin queue endpoints."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StringConstraints

# A message's id or its transaction's (both UUIDs in SQS and here): short and ASCII, so that
# the most a redrive may name (500) always fits the body limit (RELAY_MAX_BODY_BYTES, 64 KiB).
MessageRef = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,100}$")]


class LaneChange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    state: Literal["running", "paused", "draining"] = Field(
        description="paused: nothing is received; draining: go on until the queue is empty, "
        "then paused; running: as usual"
    )
    reason: str | None = Field(None, max_length=500, description="shown beside the state")


class LaneView(BaseModel):
    lane: str
    state: str
    reason: str | None
    changed_by: str | None = Field(alias="changedBy")
    changed_at: str | None = Field(alias="changedAt")


class ConsumerView(BaseModel):
    consumer: str
    lane: str
    state: str = Field(description="running | pausing | paused | stopped")
    in_flight: int = Field(alias="inFlight")
    received: int
    circuit: str
    started_at: str = Field(alias="startedAt")
    seen_seconds_ago: float = Field(alias="seenSecondsAgo")


class QueuesView(BaseModel):
    lanes: list[LaneView]
    consumers: list[ConsumerView]
    depths: dict[str, dict[str, int] | str] = Field(
        description="queue and dlq: visible, inFlight, delayed (SQS's approximate counts), or "
        "why they could not be read"
    )


class DeadLetterRow(BaseModel):
    id: str
    client_id: str = Field(alias="clientId")
    type: str
    status: str
    error: str | None
    attempts: int
    executor_tx_id: str | None = Field(alias="executorTxId")
    created_at: str | None = Field(alias="createdAt")
    updated_at: str | None = Field(alias="updatedAt")


class DeadLetterEvent(BaseModel):
    at: str | None
    from_: str | None = Field(alias="from")
    to: str
    source: str
    reason: str | None


class DeadLetterView(BaseModel):
    message_id: str = Field(alias="messageId")
    transaction_id: str | None = Field(alias="transactionId")
    kind: str | None = Field(
        description="permanent | exhausted | poison (set by a consumer); null: moved by the "
        "queue's redrive policy"
    )
    reason: str
    receive_count: int | None = Field(alias="receiveCount")
    dead_lettered_at: str | None = Field(alias="deadLetteredAt")
    transaction: DeadLetterRow | None = Field(description="its row, if it has one")
    body: str | None = Field(None, description="the message as sent (one message only)")
    events: list[DeadLetterEvent] | None = Field(None, description="its row's history")


class DeadLetters(BaseModel):
    queue: str
    depth: int = Field(description="messages in the DLQ (SQS's approximate count)")
    messages: list[DeadLetterView]


class Purged(BaseModel):
    purged: int = Field(description="messages the DLQ held (approximately)")


class RedriveRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    messages: list[MessageRef] | None = Field(
        None,
        max_length=500,
        description="message or transaction ids, at most 500 a request (which fits the body "
        "limit); null: every message",
    )
    all: StrictBool = Field(False, description="must be true when messages is null")


class RedriveItem(BaseModel):
    message_id: str | None = Field(alias="messageId")
    transaction_id: str | None = Field(alias="transactionId")
    why: str | None = None


class RedriveResult(BaseModel):
    redriven: list[RedriveItem]
    left: list[RedriveItem] = Field(description="left in the DLQ, each with why")
    how: Literal["move task", "per message"] = Field(
        description="move task: one SQS StartMessageMoveTask (where the server has it and "
        "every message could go); per message: receive, send, delete"
    )
