"""Lifecycle configuration: the body of ``PUT /__admin/lifecycle`` and ``STUB_LIFECYCLE``."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

HoldStatus = Literal["pending", "sent", "submitted", "mined"]


class LifecycleConfig(BaseModel):
    """pending -(delay_sent_ms)-> sent -(delay_submitted_ms)-> submitted -(delay_mined_ms)->
    mined | failed -(delay_confirmed_ms)-> confirmed (or canceled, for a canceled no-op)."""

    model_config = ConfigDict(extra="forbid")

    paused: bool = Field(False, description="nothing moves (no step, no expiry) while paused")
    hold_at: HoldStatus | None = Field(
        None, description="transactions advance up to this status and wait there"
    )
    delay_sent_ms: float = Field(200.0, ge=0)
    delay_submitted_ms: float = Field(300.0, ge=0)
    delay_mined_ms: float = Field(400.0, ge=0)
    delay_confirmed_ms: float = Field(500.0, ge=0)

    failure_rate: float = Field(0.0, ge=0, le=1, description="share that ends failed")
    fail_to: list[str] = Field(default_factory=list, description="sends to these always fail")
    fail_data_marker: str | None = Field(
        None, description="hex (no 0x); calldata containing it always fails"
    )
    failure_reason: str = "Transaction reverted: receipt status 0"
    seed: int | None = None

    @field_validator("fail_to")
    @classmethod
    def _lower(cls, values: list[str]) -> list[str]:
        return [value.strip().lower() for value in values if value.strip()]

    @field_validator("fail_data_marker")
    @classmethod
    def _marker(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        marker = value.strip().lower().removeprefix("0x")
        if any(c not in "0123456789abcdef" for c in marker):
            raise ValueError("must be hex")
        return marker
