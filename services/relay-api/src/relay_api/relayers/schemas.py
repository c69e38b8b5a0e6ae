"""Bodies of the admin relayer endpoints."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class RelayerChange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    state: Literal["running", "paused"] = Field(
        description="paused: the relayer takes no new work and finishes what it holds; "
        "running: as usual"
    )
    reason: str | None = Field(None, max_length=500, description="shown beside the state")


class RelayerView(BaseModel):
    relayer: str
    state: str = Field(
        description="ok | paused | open (its executor does not answer) | jammed (its oldest "
        "submitted transaction is not mined) | low (balance below its floor) | unknown (no "
        "consumer has reported it in the last hour)"
    )
    detail: str | None = Field(description="why, in the consumer's words")
    submitted: int | None = Field(description="its transactions submitted and not yet mined")
    oldest_submitted_at: str | None = Field(alias="oldestSubmittedAt")
    balance_wei: str | None = Field(alias="balanceWei", description="as last read, in wei")
    balance_at: str | None = Field(alias="balanceAt", description="when it was read")
    min_balance_wei: str = Field(
        alias="minBalanceWei", description="its floor: below it, the relayer is low"
    )
    last_mined_at: str | None = Field(alias="lastMinedAt")
    seen_at: str | None = Field(alias="seenAt", description="when a consumer last reported it")
    seen_by: str | None = Field(alias="seenBy", description="which consumer")
    paused: bool = Field(description="an operator's switch, whatever the consumers report")
    paused_by: str | None = Field(alias="pausedBy", description="who last switched it")
    pause_reason: str | None = Field(alias="pauseReason")


class RelayersView(BaseModel):
    relayers: list[RelayerView] = Field(description="every relayer of the pool, in its order")
    jam_after_s: float = Field(
        alias="jamAfterS", description="a submitted transaction not mined for this long jams"
    )
    min_balance_wei: str = Field(
        alias="minBalanceWei", description="the default floor (a relayer may have its own)"
    )
