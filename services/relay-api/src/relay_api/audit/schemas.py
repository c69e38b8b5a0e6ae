"""The audit log as the admin endpoint shows it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class AuditActor(BaseModel):
    id: str | None = Field(description="the key's client id; null for the relay command")
    name: str
    role: str = Field(description="admin | operator | cli")


class AuditTarget(BaseModel):
    kind: str = Field(description="client | lane | relayer | dlq")
    id: str | None
    name: str | None


class AuditEntryView(BaseModel):
    id: int
    at: str
    actor: AuditActor
    action: str = Field(
        description="client.create, client.change, client.revoke, lane.pause, lane.drain, "
        "lane.resume, relayer.pause, relayer.resume, dlq.redrive, dlq.purge"
    )
    target: AuditTarget
    before: dict[str, Any] | None
    after: dict[str, Any] | None


class AuditPage(BaseModel):
    entries: list[AuditEntryView] = Field(description="newest first")
    next_cursor: str | None = Field(alias="nextCursor", description="for the older entries")
