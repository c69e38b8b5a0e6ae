"""Bodies of the admin queue endpoints."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


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
