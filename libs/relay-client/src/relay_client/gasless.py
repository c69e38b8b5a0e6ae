"""Signing a gasless (ERC-2771) request locally: the EIP-712 ForwardRequest the forwarder
verifies, signed for the domain the API publishes. Needs ``eth-account``
(``pip install 'relay-client[gasless]'``); nothing else in the package does."""

from __future__ import annotations

from typing import Any, Protocol


class Signer(Protocol):
    """An eth-account ``LocalAccount``, or anything with its ``address`` and
    ``sign_message``."""

    @property
    def address(self) -> str: ...

    def sign_message(self, signable_message: Any) -> Any: ...


def as_signer(signer: Signer | str | bytes) -> Signer:
    """A signer from an account, or from a private key (hex or bytes)."""
    if isinstance(signer, str | bytes):
        account = _eth_account().Account
        return account.from_key(signer)
    return signer


def forward_request(
    sender: str, to: str, *, data: str, value: int, gas: int, nonce: int, deadline: int
) -> dict[str, Any]:
    """The request as the API takes it: integers as decimal strings, the deadline a number."""
    return {
        "from": sender,
        "to": to,
        "value": str(value),
        "gas": str(gas),
        "nonce": str(nonce),
        "deadline": deadline,
        "data": data,
    }


def sign(signer: Signer, typed: dict[str, Any], request: dict[str, Any]) -> str:
    """The 65-byte signature (0x hex) of ``request`` under the domain and types in ``typed``
    (``GET /api/v1/relay/gasless/domain``)."""
    encode_typed_data = _eth_account().messages.encode_typed_data
    data = request["data"]
    message = {
        **request,
        "value": int(request["value"]),
        "gas": int(request["gas"]),
        "nonce": int(request["nonce"]),
        "data": bytes.fromhex(data[2:]),
    }
    signable = encode_typed_data(full_message={**typed, "message": message})
    signature = signer.sign_message(signable).signature
    return "0x" + bytes(signature).hex()


def _eth_account() -> Any:
    try:
        import eth_account
        import eth_account.messages
    except ImportError as exc:  # pragma: no cover - depends on what is installed
        raise ImportError(
            "gasless signing needs eth-account: pip install 'relay-client[gasless]'"
        ) from exc
    return eth_account
