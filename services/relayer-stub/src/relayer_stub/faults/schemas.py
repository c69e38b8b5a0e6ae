"""Fault configuration: the body of ``PUT /__admin/faults`` and the value of ``STUB_FAULTS``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class LatencyConfig(BaseModel):
    """Added latency before a request is answered.

    ``{"dist": "fixed", "ms": 50}``, ``{"dist": "uniform", "min_ms": 10, "max_ms": 90}`` or
    ``{"dist": "normal", "mean_ms": 50, "stddev_ms": 10}`` (clipped at 0, and at ``max_ms``
    when that is set). A bare number means fixed milliseconds.
    """

    model_config = ConfigDict(extra="forbid")

    dist: Literal["none", "fixed", "uniform", "normal"] = "none"
    ms: float = Field(0.0, ge=0)
    min_ms: float = Field(0.0, ge=0)
    max_ms: float = Field(0.0, ge=0)
    mean_ms: float = Field(0.0, ge=0)
    stddev_ms: float = Field(0.0, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _number_is_fixed(cls, value: Any) -> Any:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return {"dist": "fixed" if value > 0 else "none", "ms": value}
        return value

    @model_validator(mode="after")
    def _bounds(self) -> LatencyConfig:
        if self.dist == "uniform" and self.max_ms < self.min_ms:
            raise ValueError("uniform latency needs max_ms >= min_ms")
        return self


def _lower_addresses(values: list[str]) -> list[str]:
    return [value.strip().lower() for value in values if value.strip()]


class FaultConfig(BaseModel):
    """What to inject. ``*_next`` counters fire on the next N requests in scope and count down;
    ``*_rate`` fire with that probability, drawn from an RNG seeded with ``seed``.

    Order per request in scope: latency, then 429, then 5xx; for a send that passed
    validation: 400 for ``reject_to``, then accept-then-hang.
    """

    model_config = ConfigDict(extra="forbid")

    scope: Literal["all", "submit"] = Field(
        "all",
        description="all: every authenticated /api/v1 request; submit: POST .../transactions only",
    )
    latency: LatencyConfig = Field(default_factory=LatencyConfig)

    error_rate: float = Field(0.0, ge=0, le=1)
    error_next: int = Field(0, ge=0)
    error_status: int = Field(500, ge=500, le=599)

    rate_limit_rate: float = Field(0.0, ge=0, le=1)
    rate_limit_next: int = Field(0, ge=0)
    rate_limit_after_s: int = Field(1, ge=0)

    reject_to: list[str] = Field(
        default_factory=list, description="sends to these addresses get 400 (not recorded)"
    )

    hang_rate: float = Field(0.0, ge=0, le=1)
    hang_next: int = Field(0, ge=0)
    hang_to: list[str] = Field(default_factory=list)
    hang_s: float = Field(30.0, ge=0, description="how long an accepted send is held")

    # Chain mode: what the node does with the stub's broadcasts.
    broadcast_drop_next: int = Field(
        0, ge=0, description="the next N broadcasts are lost on the way (no answer)"
    )
    broadcast_reject_next: int = Field(
        0, ge=0, description="the next N broadcasts are refused by the node (an RPC error)"
    )

    # Per relayer (ids of STUB_RELAYER_IDS; an unknown one is a validation error).
    jam_relayers: list[str] = Field(
        default_factory=list,
        description="these relayers accept sends but mine none until lifted ([]): memory mode "
        "holds their transactions at submitted, chain mode leaves them pending, unsent",
    )
    relayer_balances: dict[str, Annotated[int, Field(ge=0)]] = Field(
        default_factory=dict,
        description="relayer id -> the balance (wei) its balance and status routes report, "
        "instead of 10**21 (memory) or eth_getBalance (chain)",
    )

    seed: int | None = None

    @field_validator("reject_to", "hang_to")
    @classmethod
    def _lower(cls, values: list[str]) -> list[str]:
        return _lower_addresses(values)

    @field_validator("jam_relayers")
    @classmethod
    def _ids(cls, values: list[str]) -> list[str]:
        return list(dict.fromkeys(value.strip() for value in values if value.strip()))

    @field_validator("relayer_balances", mode="before")
    @classmethod
    def _no_booleans(cls, value: Any) -> Any:
        if isinstance(value, dict) and any(isinstance(v, bool) for v in value.values()):
            raise ValueError("a balance is a whole number of wei")
        return value

    def unknown_relayers(self, relayer_ids: Iterable[str]) -> list[str]:
        """The relayer ids named by the per-relayer faults that are not in ``relayer_ids``."""
        named = set(self.jam_relayers) | set(self.relayer_balances)
        return sorted(named - set(relayer_ids))
