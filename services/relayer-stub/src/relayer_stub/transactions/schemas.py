"""``EvmTransactionRequest``: parsed and validated the way upstream does it.

serde-style type errors come first (``missing field `value```), then the request's own
validation (``OZR:src/models/transaction/request/evm.rs``). Every failure is a 400 with the
envelope. ``to`` and ``data`` formats are not checked here: upstream accepts them and the
transaction fails later, when it is signed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from relay_core.errors import BadRequest

U64_MAX = 2**64 - 1
U128_MAX = 2**128 - 1
U256_MAX = 2**256 - 1
SPEEDS = ("fastest", "fast", "average", "safeLow")
_RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[Zz]|[+-]\d{2}:\d{2})$"
)
_ADDRESS = re.compile(r"^0x[0-9a-fA-F]{40}$")
_HEX_BODY = re.compile(r"^(?:[0-9a-fA-F]{2})*$")


@dataclass(frozen=True, slots=True)
class SendRequest:
    to: str | None
    data: str | None
    value: int
    gas_limit: int | None
    gas_price: int | None
    speed: str | None
    max_fee_per_gas: int | None
    max_priority_fee_per_gas: int | None
    valid_until_ts: float | None


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean `{str(value).lower()}`"
    if isinstance(value, int):
        return f"integer `{value}`"
    if isinstance(value, float):
        return f"floating point `{value}`"
    if isinstance(value, str):
        return f'string "{value}"'
    if isinstance(value, list):
        return "sequence"
    return "map"


def _invalid_type(value: Any, expected: str) -> BadRequest:
    return BadRequest(f"invalid type: {_json_kind(value)}, expected {expected}")


def parse_value(raw: Any) -> int:
    """alloy ``U256``: a JSON integer (u64 range, as serde_json holds it without
    arbitrary_precision) or a string in decimal, 0x, 0o or 0b form."""
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise _invalid_type(raw, "a 256-bit unsigned integer")
    if isinstance(raw, int):
        if raw < 0 or raw > U64_MAX:
            raise BadRequest(f"invalid value: integer `{raw}`, expected a 256-bit unsigned integer")
        return raw
    text = raw.strip()
    bases = {"0x": 16, "0o": 8, "0b": 2}
    base = bases.get(text[:2].lower(), 10)
    digits = text[2:] if base != 10 else text
    try:
        if not digits or not digits.isascii() or digits[0] in "+-_":
            raise ValueError(digits)
        number = int(digits, base)
    except ValueError:
        raise BadRequest(
            f'invalid value: string "{raw}", expected a 256-bit unsigned integer'
        ) from None
    if number > U256_MAX:
        raise BadRequest(f'invalid value: string "{raw}", number too large to fit in target type')
    return number


def _optional_uint(body: dict[str, Any], name: str, maximum: int, kind: str) -> int | None:
    raw = body.get(name)
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise _invalid_type(raw, kind)
    if raw < 0 or raw > maximum:
        raise BadRequest(f"invalid value: integer `{raw}`, expected {kind}")
    return raw


def _optional_str(body: dict[str, Any], name: str) -> str | None:
    raw = body.get(name)
    if raw is None or isinstance(raw, str):
        return raw
    raise _invalid_type(raw, "a string")


def intrinsic_gas(to: str | None, data: str | None) -> int:
    gas = 21_000 if to is not None else 53_000
    body = (data or "").removeprefix("0x").removeprefix("0X")
    if _HEX_BODY.fullmatch(body):
        raw = bytes.fromhex(body)
        gas += 4 * raw.count(0) + 16 * (len(raw) - raw.count(0))
    return gas


def parse_send_request(body: Any, now_ts: float) -> SendRequest:
    if not isinstance(body, dict):
        raise _invalid_type(body, "struct EvmTransactionRequest")
    if "value" not in body:
        raise BadRequest("missing field `value`")
    value = parse_value(body["value"])
    to = _optional_str(body, "to")
    data = _optional_str(body, "data")
    gas_limit = _optional_uint(body, "gas_limit", U64_MAX, "u64")
    gas_price = _optional_uint(body, "gas_price", U128_MAX, "u128")
    max_fee = _optional_uint(body, "max_fee_per_gas", U128_MAX, "u128")
    max_priority = _optional_uint(body, "max_priority_fee_per_gas", U128_MAX, "u128")
    speed = _optional_str(body, "speed")
    if speed is not None and speed not in SPEEDS:
        expected = ", ".join(f"`{s}`" for s in SPEEDS)
        raise BadRequest(f"unknown variant `{speed}`, expected one of {expected}")
    valid_until = _optional_str(body, "valid_until")

    if to is None and data is None:
        raise BadRequest(
            "Both txs `to` and `data` fields are missing. At least one of them has to be set."
        )
    valid_until_ts: float | None = None
    if valid_until is not None:
        if not _RFC3339.match(valid_until):
            raise BadRequest("Invalid validUntil datetime format")
        try:
            valid_until_ts = datetime.fromisoformat(valid_until.replace("z", "Z")).timestamp()
        except ValueError:
            raise BadRequest("Invalid validUntil datetime format") from None
        if valid_until_ts < now_ts:
            raise BadRequest("The validUntil time cannot be in the past")

    is_eip1559 = max_fee is not None or max_priority is not None
    modes = sum((is_eip1559, gas_price is not None, speed is not None))
    if modes == 0:
        raise BadRequest("Transaction must specify either gasPrice, speed, or EIP1559 parameters")
    if modes > 1:
        raise BadRequest(
            "Cannot mix different transaction types. Use either gasPrice, speed, or EIP1559 "
            "parameters"
        )
    if is_eip1559:
        if max_fee is None or max_priority is None:
            raise BadRequest(
                "EIP1559 transactions require both maxFeePerGas and maxPriorityFeePerGas"
            )
        if max_fee < max_priority:
            raise BadRequest("maxFeePerGas must be greater than or equal to maxPriorityFeePerGas")
    if gas_limit is not None:
        minimum = intrinsic_gas(to, data)
        if gas_limit < minimum:
            raise BadRequest(f"Gas limit {gas_limit} is below the intrinsic gas {minimum}")

    return SendRequest(
        to=to,
        data=data,
        value=value,
        gas_limit=gas_limit,
        gas_price=gas_price,
        speed=speed,
        max_fee_per_gas=max_fee,
        max_priority_fee_per_gas=max_priority,
        valid_until_ts=valid_until_ts,
    )


def signing_problem(to: str | None, data: str | None) -> str | None:
    """What upstream's signer would refuse (it only parses these when it signs)."""
    if to is not None and not _ADDRESS.fullmatch(to):
        return f"Invalid address: {to}"
    if data is not None and not _HEX_BODY.fullmatch(data.removeprefix("0x").removeprefix("0X")):
        return "Invalid hex data"
    return None


def normalize_data(data: str | None) -> str:
    """Lower-case, ``0x``-prefixed calldata, for ledger matching (``None`` -> ``0x``)."""
    if not data:
        return "0x"
    body = data[2:] if data[:2].lower() == "0x" else data
    return "0x" + body.lower()
