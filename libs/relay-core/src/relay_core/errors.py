"""Domain errors. Each carries its HTTP status and a stable machine-readable code.

Services raise these; the API renders every one of them as ``{"error": code, "detail": msg}``.
"""

from __future__ import annotations


class RelayError(Exception):
    status_code = 500
    code = "internal_error"

    def __init__(self, detail: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.headers = headers or {}


class BadRequest(RelayError):
    status_code = 400
    code = "bad_request"


class Unauthorized(RelayError):
    status_code = 401
    code = "unauthorized"


class Forbidden(RelayError):
    status_code = 403
    code = "forbidden"


class NotFound(RelayError):
    status_code = 404
    code = "not_found"


class Conflict(RelayError):
    status_code = 409
    code = "conflict"


class PayloadTooLarge(RelayError):
    status_code = 413
    code = "payload_too_large"


class UnsupportedMediaType(RelayError):
    status_code = 415
    code = "unsupported_media_type"


class RateLimited(RelayError):
    status_code = 429
    code = "rate_limited"


class Unavailable(RelayError):
    status_code = 503
    code = "service_unavailable"
