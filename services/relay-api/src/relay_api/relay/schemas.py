"""Request and response bodies of the relay endpoints.

The shape checks live here (types, formats, uint256 bounds, unknown fields); checks that
depend on configuration or the clock (gas ceiling, calldata size, deadlines, signatures) live
in ``service.py`` and answer 400 naming the field.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    WithJsonSchema,
)
from pydantic_core import PydanticCustomError

from relay_core import ethereum
from relay_core.statuses import TxStatus, TxType


def _address(value: str) -> str:
    try:
        return ethereum.check_address(value)
    except ValueError as exc:
        if ethereum.is_address_shape(value):  # well formed, its mixed case not a checksum
            raise PydanticCustomError(BEYOND_SCHEMA, str(exc)) from None
        raise


# The error type of a rule the schema cannot state (an EIP-55 checksum): answered 400, like
# the service's own checks, not 422 (relay_api.errors): a request the document calls valid is
# refused for what the document says in words only.
BEYOND_SCHEMA = "beyond_schema"


def _hex(value: str) -> str:
    # The configured ceiling is applied in the service; this bound only stops absurd input early.
    return ethereum.check_hex_data(value, max_bytes=1 << 20)


def _uint256(value: str) -> str:
    ethereum.parse_uint(value)
    return value


def _callback_url(value: str) -> str:
    from urllib.parse import urlsplit

    if not value.isascii() or not value.isprintable() or " " in value:
        raise ValueError(
            "must be a URI: printable ASCII without spaces (an international host name in "
            "its xn-- form, other characters percent-encoded)"
        )
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname or len(value) > 2048:
        raise ValueError("must be an absolute http(s) URL of at most 2048 characters")
    return value


def _signature(value: str) -> str:
    value = ethereum.check_hex_data(value, max_bytes=65)
    if len(value) != 132:
        raise ValueError("must be a 65-byte hex signature (0x + 130 hex digits)")
    return value


def _documented(pattern: str, description: str, **extra: object) -> WithJsonSchema:
    """The schema clients and generators see; the validator above it is the check."""
    return WithJsonSchema(
        {"type": "string", "pattern": pattern, "description": description, **extra}
    )


Address = Annotated[
    StrictStr,
    AfterValidator(_address),
    _documented("^0x[0-9a-fA-F]{40}$", "0x + 40 hex; EIP-55 checked when mixed case"),
]
HexData = Annotated[
    StrictStr, AfterValidator(_hex), _documented("^0x([0-9a-fA-F]{2})*$", "even-length hex")
]
Uint256 = Annotated[
    StrictStr,
    AfterValidator(_uint256),
    _documented("^(0|[1-9][0-9]*)$", "a decimal integer below 2^256", maxLength=78),
]
Signature = Annotated[
    StrictStr,
    AfterValidator(_signature),
    _documented("^0x[0-9a-fA-F]{130}$", "a 65-byte signature"),
]
CallbackUrl = Annotated[
    StrictStr,
    AfterValidator(_callback_url),
    _documented("^https?://", "an absolute http(s) URL", maxLength=2048, format="uri"),
]


def whole(value: object) -> object:
    """JSON Schema's integer is a number with no fraction: 8922.0 is one (a JSON encoder may
    well write it so), 8922.5 is not, nor is true. Used as ``BeforeValidator(whole)`` after a
    ``StrictInt`` and its bounds (so that the schema states them as minimum and maximum)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


class Speed(StrEnum):
    safe_low = "safeLow"
    average = "average"
    fast = "fast"
    fastest = "fastest"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class DirectRequest(_Strict):
    to: Address = Field(description="recipient, 0x + 40 hex; EIP-55 checked when mixed case")
    data: HexData = Field("0x", description='calldata, even-length hex; "0x" for a transfer')
    value: Uint256 = Field("0", description="wei as a decimal string")
    gas_limit: Uint256 | None = Field(None, alias="gasLimit", description="decimal string")
    speed: Speed = Field(
        Speed.fast,
        description="gas price speed for the executor (default fast). Asking for fast or "
        "fastest also puts the transaction in the fast lane, received before the normal one",
    )
    valid_until: StrictStr | None = Field(
        None, alias="validUntil", description="RFC 3339 time in the future"
    )
    callback_url: CallbackUrl | None = Field(
        None, alias="callbackUrl", description="status notifications for this transaction"
    )


class ForwardRequestBody(_Strict):
    from_: Address = Field(alias="from")
    to: Address
    value: Uint256 = "0"
    gas: Uint256
    nonce: Uint256
    deadline: Annotated[StrictInt, Field(ge=0, le=ethereum.UINT48_MAX), BeforeValidator(whole)] = (
        Field(description="unix seconds (uint48)")
    )
    data: HexData = "0x"


class GaslessRequest(_Strict):
    request: ForwardRequestBody
    signature: Signature = Field(description="EIP-712 signature of the ForwardRequest, 65 bytes")
    callback_url: CallbackUrl | None = Field(
        None, alias="callbackUrl", description="status notifications for this transaction"
    )


class AcceptedResponse(BaseModel):
    transaction_id: str = Field(alias="transactionId")
    status: TxStatus
    created_at: str = Field(alias="createdAt")

    model_config = ConfigDict(populate_by_name=True)


class Eip712Domain(BaseModel):
    name: str
    version: str
    chain_id: int = Field(alias="chainId")
    verifying_contract: str = Field(alias="verifyingContract")


class Eip712Field(BaseModel):
    name: str
    type: str


class DomainResponse(BaseModel):
    """What a gasless request is signed for, as ``eth_account``'s ``encode_typed_data``
    (``full_message``) and wallets take it."""

    domain: Eip712Domain
    types: dict[str, list[Eip712Field]]
    primary_type: str = Field(alias="primaryType")


class NonceResponse(BaseModel):
    address: str
    nonce: str = Field(description="decimal string")


class CallbackRequest(_Strict):
    url: CallbackUrl | None = Field(description="where notifications go; null turns them off")
    rotate_secret: StrictBool = Field(False, alias="rotateSecret")


class CallbackResponse(BaseModel):
    url: str | None
    secret: str | None = Field(description="shown only when created or rotated")


class StatusResponse(BaseModel):
    transaction_id: str = Field(alias="transactionId")
    type: TxType
    status: TxStatus
    hash: str | None
    error_message: str | None = Field(alias="errorMessage")
    created_at: str = Field(alias="createdAt")
    updated_at: str = Field(alias="updatedAt")
    submitted_at: str | None = Field(alias="submittedAt")
    confirmed_at: str | None = Field(alias="confirmedAt")
    # What it cost, from its receipt: null until the consumer has read it (soon after it is
    # mined, when RELAY_CHAIN_RPC_URL is set), and for a transaction that never reached the
    # chain. With defaults: an answer cached before these fields existed lacks them.
    block_number: int | None = Field(
        None, alias="blockNumber", description="the block it was mined in", examples=[1234567]
    )
    gas_used: int | None = Field(
        None, alias="gasUsed", description="gas it used, from its receipt", examples=[21000]
    )
    effective_gas_price: str | None = Field(
        None,
        alias="effectiveGasPrice",
        description="wei paid per gas, a decimal string, from its receipt",
        pattern=r"^[0-9]+$",
        examples=["1500000000"],
    )
    fee_wei: str | None = Field(
        None,
        alias="feeWei",
        description="what it cost in wei (gasUsed x effectiveGasPrice), a decimal string; "
        '"0" without a receipt: a fee reserved by a daily fee budget, given back because it '
        "never reached the chain",
        pattern=r"^[0-9]+$",
        examples=["31500000000000"],
    )

    model_config = ConfigDict(populate_by_name=True)


class TransactionPage(BaseModel):
    items: list[StatusResponse]
    next_cursor: str | None = Field(alias="nextCursor")

    model_config = ConfigDict(populate_by_name=True)


def parse_rfc3339(value: str) -> datetime:
    """Parse an RFC 3339 timestamp that carries an explicit offset."""
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError as exc:
        raise ValueError("must be an RFC 3339 timestamp such as 2030-01-01T00:00:00Z") from exc
    if parsed.tzinfo is None:
        raise ValueError("must carry a UTC offset (for example a trailing Z)")
    return parsed


class CancelResponse(BaseModel):
    transaction_id: str = Field(alias="transactionId")
    status: TxStatus = Field(description="where the transaction is now")
    cancel: Literal["done", "requested", "sent"] = Field(
        description="done: canceled (200); requested: a consumer is sending it, and cancels "
        "it at the executor as soon as it has it, or never sends it (202); sent: the "
        "executor is replacing it with a no-op, canceled once that is mined unless the "
        "original is mined first (202)"
    )
    detail: str


class CancelRefused(BaseModel):
    error: str = Field(examples=["conflict"])
    detail: str
    status: TxStatus = Field(description="where the transaction is: mined, or final")


MAX_BATCH = 100


class BatchRequest(_Strict):
    transactions: list[DirectRequest] = Field(
        min_length=1,
        max_length=MAX_BATCH,
        description=f"1-{MAX_BATCH} direct transactions, accepted or refused together",
    )


class BatchResponse(BaseModel):
    results: list[AcceptedResponse] = Field(
        description="one per transaction, in the request's order"
    )


class SpeedUpRequest(_Strict):
    speed: Speed = Field(description="the speed to send it at from now on")


class SpeedUpResponse(BaseModel):
    transaction_id: str = Field(alias="transactionId")
    status: TxStatus = Field(description="where the transaction is now")
    speed: Speed
    speed_up: Literal["done", "sent"] = Field(
        alias="speedUp",
        description="done: not sent yet, it will be sent at this speed (and in the fast lane "
        "for fast or fastest); sent: the executor replaced it at its nonce with this speed",
    )
    hash: str | None = Field(description="the executor's hash for it now (sent)")
    detail: str

    model_config = ConfigDict(populate_by_name=True)
