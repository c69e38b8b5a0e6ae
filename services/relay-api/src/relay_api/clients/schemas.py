"""Bodies of the admin client endpoints."""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
)

from relay_api.limits.bounds import MAX_RATE_PER_S, MIN_RATE_PER_S
from relay_api.relay.schemas import Address, Speed, Uint256, whole


class ClientChanges(BaseModel):
    """Only the fields sent change; null clears a limit."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    allowed_to: list[Address] | None = Field(
        None, alias="allowedTo", max_length=1000, description="destinations; [] or null: any"
    )
    max_value_wei: Uint256 | None = Field(None, alias="maxValueWei", description="per transaction")
    daily_value_wei: Uint256 | None = Field(
        None, alias="dailyValueWei", description="per rolling 24 hours"
    )
    max_gas: Annotated[StrictInt, BeforeValidator(whole)] | None = Field(
        None, alias="maxGas", description="highest gas limit"
    )
    gasless_value: StrictBool = Field(False, alias="gaslessValue")
    max_fee_wei: Uint256 | None = Field(
        None,
        alias="maxFeeWei",
        description="the most fee one transaction may cost: its gas limit x the most a unit "
        "of gas can cost at its speed",
    )
    daily_fee_wei: Uint256 | None = Field(
        None,
        alias="dailyFeeWei",
        description="fees per rolling 24 hours: reserved at accept at the most, settled to "
        "the receipt's fee once mined",
    )
    speeds: list[Speed] | None = Field(
        None, max_length=4, description="the speeds it may ask for; [] or null: any"
    )
    rate_limit_per_s: StrictFloat | None = Field(
        None, alias="rateLimitPerS", ge=MIN_RATE_PER_S, le=MAX_RATE_PER_S
    )
    rate_limit_burst: (
        Annotated[StrictInt, Field(ge=1, le=10_000_000), BeforeValidator(whole)] | None
    ) = Field(None, alias="rateLimitBurst")


class RateLimitView(BaseModel):
    per_second: float = Field(alias="perSecond")
    burst: int
    own: bool = Field(description="false: the deployment's default")


class PolicyView(BaseModel):
    granted: bool = Field(
        description="an operator granted this client a policy; until then it may submit nothing"
    )
    unlimited: bool = Field(
        description="granted with no limit at all (any destination, value and gas): flagged"
    )
    granted_at: str | None = Field(alias="grantedAt")
    granted_by: str | None = Field(alias="grantedBy", description="who granted it")
    allowed_to: list[str] = Field(alias="allowedTo")
    max_value_wei: str | None = Field(alias="maxValueWei")
    daily_value_wei: str | None = Field(alias="dailyValueWei")
    max_gas: int | None = Field(alias="maxGas")
    gasless_value: bool = Field(alias="gaslessValue")
    max_fee_wei: str | None = Field(alias="maxFeeWei")
    daily_fee_wei: str | None = Field(alias="dailyFeeWei")
    speeds: list[str] = Field(description="the speeds it may ask for; empty: any")


class ClientView(BaseModel):
    id: str
    name: str
    role: str
    key_prefix: str = Field(alias="keyPrefix")
    revoked: bool
    callback_url: str | None = Field(alias="callbackUrl")
    rate_limit: RateLimitView = Field(alias="rateLimit")
    policy: PolicyView
    spent_last_24h_wei: str = Field(
        alias="spentLast24hWei", description="value reserved in the last 24 hours"
    )
    fees_last_24h_wei: str = Field(
        alias="feesLast24hWei",
        description="fees reserved in the last 24 hours (the most each could cost, until its "
        "receipt settles it)",
    )
