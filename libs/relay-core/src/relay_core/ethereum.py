"""EVM primitives: address checksums, hex payloads, EIP-712 ForwardRequest signatures and
the ERC2771Forwarder ``execute`` calldata (OpenZeppelin Contracts v5 layout)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from eth_abi import encode as abi_encode
from eth_account import Account
from eth_account.messages import encode_typed_data
from eth_utils import keccak, to_checksum_address

UINT256_MAX = 2**256 - 1
UINT48_MAX = 2**48 - 1

# Matched with fullmatch: ``$`` would also accept a trailing newline ("5\n").
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}")
_HEX = re.compile(r"0x(?:[0-9a-fA-F]{2})*")
_DECIMAL = re.compile(r"0|[1-9][0-9]*")


def is_address_shape(value: str) -> bool:
    """0x and 40 hex digits, whatever their case."""
    return _ADDRESS.fullmatch(value) is not None


@functools.lru_cache(maxsize=4096)
def check_address(value: str) -> str:
    """Return the EIP-55 form of ``value``; mixed case must already carry a valid checksum.

    Cached: a keccak per call, and clients send to the same few addresses again and again
    (an invalid address raises, and exceptions are not cached)."""
    if not _ADDRESS.fullmatch(value):
        raise ValueError("must be 0x followed by 40 hex digits")
    body = value[2:]
    checksummed = to_checksum_address(value)
    if body != body.lower() and body != body.upper() and value != checksummed:
        raise ValueError("has an invalid EIP-55 checksum")
    return checksummed


def check_hex_data(value: str, max_bytes: int) -> str:
    if not _HEX.fullmatch(value):
        raise ValueError("must be 0x followed by an even number of hex digits")
    if (len(value) - 2) // 2 > max_bytes:
        raise ValueError(f"must be at most {max_bytes} bytes")
    return value.lower()


def parse_uint(value: str, *, maximum: int = UINT256_MAX, minimum: int = 0) -> int:
    """Parse a canonical decimal string (no sign, no leading zeros, no exponent)."""
    if not _DECIMAL.fullmatch(value) or len(value) > 78:
        raise ValueError('must be a decimal integer string such as "1000"')
    number = int(value)
    if number > maximum:
        raise ValueError(f"must be at most {maximum}")
    if number < minimum:
        raise ValueError(f"must be at least {minimum}")
    return number


@dataclass(frozen=True, slots=True)
class ForwarderDomain:
    name: str
    version: str
    chain_id: int
    verifying_contract: str


@dataclass(frozen=True, slots=True)
class ForwardRequest:
    """ERC-2771 ForwardRequest as signed by the user (OpenZeppelin ERC2771Forwarder v5)."""

    sender: str
    to: str
    value: int
    gas: int
    nonce: int
    deadline: int
    data: str


FORWARD_REQUEST_TYPES = {
    "EIP712Domain": [
        {"name": "name", "type": "string"},
        {"name": "version", "type": "string"},
        {"name": "chainId", "type": "uint256"},
        {"name": "verifyingContract", "type": "address"},
    ],
    "ForwardRequest": [
        {"name": "from", "type": "address"},
        {"name": "to", "type": "address"},
        {"name": "value", "type": "uint256"},
        {"name": "gas", "type": "uint256"},
        {"name": "nonce", "type": "uint256"},
        {"name": "deadline", "type": "uint48"},
        {"name": "data", "type": "bytes"},
    ],
}


def forward_request_typed_data(domain: ForwarderDomain, request: ForwardRequest) -> dict[str, Any]:
    return {
        "types": FORWARD_REQUEST_TYPES,
        "primaryType": "ForwardRequest",
        "domain": {
            "name": domain.name,
            "version": domain.version,
            "chainId": domain.chain_id,
            "verifyingContract": domain.verifying_contract,
        },
        "message": {
            "from": request.sender,
            "to": request.to,
            "value": request.value,
            "gas": request.gas,
            "nonce": request.nonce,
            "deadline": request.deadline,
            "data": bytes.fromhex(request.data[2:]),
        },
    }


def recover_forward_request_signer(
    domain: ForwarderDomain, request: ForwardRequest, signature: str
) -> str:
    """The address that signed ``request`` under ``domain``; raises ValueError if unusable."""
    raw = bytes.fromhex(signature[2:])
    if len(raw) != 65:
        raise ValueError("must be a 65-byte signature")
    message = encode_typed_data(full_message=forward_request_typed_data(domain, request))
    try:
        return str(Account.recover_message(message, signature=raw))
    except Exception as exc:  # eth-keys raises several types for malformed r/s/v
        raise ValueError("is not a valid secp256k1 signature") from exc


def sign_forward_request(
    domain: ForwarderDomain, request: ForwardRequest, private_key: bytes | str
) -> str:
    """Sign as a wallet would (used by tests, the dev tooling and the benchmarks)."""
    message = encode_typed_data(full_message=forward_request_typed_data(domain, request))
    signed = Account.sign_message(message, private_key=private_key)
    return "0x" + bytes(signed.signature).hex()


_EXECUTE_SELECTOR = keccak(text="execute((address,address,uint256,uint256,uint48,bytes,bytes))")[:4]


def forwarder_execute_calldata(request: ForwardRequest, signature: str) -> str:
    """Calldata for ``ERC2771Forwarder.execute(ForwardRequestData)``.

    ForwardRequestData is (from, to, value, gas, deadline, data, signature); the nonce is not
    part of it, the forwarder reads it from its own storage.
    """
    encoded = abi_encode(
        ["(address,address,uint256,uint256,uint48,bytes,bytes)"],
        [
            (
                request.sender,
                request.to,
                request.value,
                request.gas,
                request.deadline,
                bytes.fromhex(request.data[2:]),
                bytes.fromhex(signature[2:]),
            )
        ],
    )
    return "0x" + (_EXECUTE_SELECTOR + encoded).hex()
