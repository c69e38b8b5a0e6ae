"""Relay's Python client: submit EVM transactions (direct or gasless), follow them to a final
status, page through your history, and verify the callbacks Relay signs.

    from relay_client import RelayClient

    with RelayClient("https://relay.example.com", api_key="rk_...") as relay:
        accepted = relay.submit_direct("0x000000000000000000000000000000000000dEaD", value=1)
        final = relay.wait(accepted.transaction_id)
        print(final.status, final.hash)

:class:`AsyncRelayClient` has the same methods for asyncio.
"""

from relay_client.callbacks import verify_callback
from relay_client.client import AsyncRelayClient, RelayClient
from relay_client.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    InvalidCallback,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    RelayError,
    RepeatedCallback,
    Unauthorized,
    Unavailable,
    ValidationFailed,
    WaitTimeout,
)
from relay_client.models import (
    FINAL_STATUSES,
    Accepted,
    Callback,
    CallbackSettings,
    CancelResult,
    Page,
    SpeedUpResult,
    Status,
)

__all__ = [
    "FINAL_STATUSES",
    "Accepted",
    "AsyncRelayClient",
    "BadRequest",
    "Callback",
    "CallbackSettings",
    "CancelResult",
    "Conflict",
    "Forbidden",
    "InvalidCallback",
    "NotFound",
    "Page",
    "PayloadTooLarge",
    "RateLimited",
    "RelayClient",
    "RelayError",
    "RepeatedCallback",
    "SpeedUpResult",
    "Status",
    "Unauthorized",
    "Unavailable",
    "ValidationFailed",
    "WaitTimeout",
    "verify_callback",
]
