"""What the API refuses becomes an exception carrying its ``{error, detail}`` body.

One class per status a caller may want to catch apart; each keeps the HTTP status, the API's
stable ``error`` code and its ``detail``. :class:`RateLimited` and :class:`Unavailable` carry
``retry_after`` (seconds) when the API said how long to wait.
"""

from __future__ import annotations

from typing import Any


class RelayError(Exception):
    """Any refusal by the API (and the base of every error this package raises)."""

    def __init__(
        self,
        status: int,
        error: str,
        detail: str,
        *,
        fields: list[dict[str, str]] | None = None,
        retry_after: float | None = None,
        transaction_status: str | None = None,
    ) -> None:
        super().__init__(f"{status} {error}: {detail}" if status else f"{error}: {detail}")
        self.status = status
        self.error = error
        self.detail = detail
        self.fields = fields or []
        self.retry_after = retry_after
        self.transaction_status = transaction_status  # a cancel too late: where it is


class BadRequest(RelayError):
    """400: the request names a field that is wrong (or the body is not JSON)."""


class Unauthorized(RelayError):
    """401: the API key is missing, unknown or revoked."""


class Forbidden(RelayError):
    """403: not allowed for this key, or refused by the client's spend policy
    (``error == "policy_refused"``)."""


class NotFound(RelayError):
    """404: no such transaction (for this key), or gasless relaying is not configured."""


class Conflict(RelayError):
    """409: the idempotency key was used with another body, the nonce is in flight, or a
    cancel came too late (``transaction_status``: mined, or final)."""


class PayloadTooLarge(RelayError):
    """413: the body is larger than the API accepts."""


class ValidationFailed(RelayError):
    """422: the body does not match the schema; ``fields`` names each field and why."""


class RateLimited(RelayError):
    """429: over the key's rate limit; ``retry_after`` says when a token is back."""


class Unavailable(RelayError):
    """503: the API cannot reach its database right now; nothing was accepted."""


class WaitTimeout(RelayError):
    """:meth:`wait` gave up before the transaction reached a final status."""

    def __init__(self, transaction_id: str, last_status: str, timeout_s: float) -> None:
        super().__init__(
            0,
            "wait_timeout",
            f"{transaction_id} is still {last_status} after {timeout_s:g} s",
        )
        self.transaction_id = transaction_id
        self.last_status = last_status


class InvalidCallback(RelayError):
    """A callback whose signature, timestamp or headers do not verify."""

    def __init__(self, detail: str) -> None:
        super().__init__(0, "invalid_callback", detail)


class RepeatedCallback(InvalidCallback):
    """A callback whose ``webhook-id`` was verified already within the replay window: Relay
    sending it again (an answer it did not get) or someone replaying it. Answer 2xx and do
    nothing more: ``callback`` is what was verified the first time."""

    def __init__(self, callback: Any) -> None:
        super().__init__(f"webhook-id {callback.id} was already verified")
        self.callback = callback


_BY_STATUS: dict[int, type[RelayError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: ValidationFailed,
    429: RateLimited,
    503: Unavailable,
}


def from_response(status: int, body: Any, retry_after: str | None) -> RelayError:
    """The exception for an error response (any body: a proxy's HTML page included)."""
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        error, detail = body["error"], str(body.get("detail", ""))
        fields = body.get("fields") if isinstance(body.get("fields"), list) else None
    else:
        error, detail, fields = "http_error", str(body)[:500], None
    kind = _BY_STATUS.get(status, RelayError)
    current = body.get("status") if isinstance(body, dict) else None
    return kind(
        status,
        error,
        detail,
        fields=fields,
        retry_after=parse_retry_after(retry_after),
        transaction_status=current if isinstance(current, str) else None,
    )


def parse_retry_after(value: str | None) -> float | None:
    """Retry-After in seconds (the API sends seconds; an HTTP date is not honoured)."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None
