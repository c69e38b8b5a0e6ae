"""Errors in the shapes OZ Relayer v1.x puts on the wire.

Handler errors use the envelope ``{"success": false, "data": null, "error": "<message>"}``;
middleware errors (401, 429) use actix's ``{success, code, error, message}``; extractor errors
(malformed JSON, a bad query string) are plain text, as actix-web's defaults are. The domain
raises :mod:`relay_core.errors` exceptions, which carry their HTTP status.
"""

from __future__ import annotations

import logging
from http import HTTPStatus

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import PlainTextResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from relay_core.errors import RelayError
from relayer_stub.responses import JSONResponse

log = logging.getLogger(__name__)


class MalformedJson(Exception):
    """The body is not JSON at all: actix answers 400 in plain text, not with the envelope."""


class RateLimitedFault(Exception):
    def __init__(self, after_s: int) -> None:
        super().__init__(after_s)
        self.after_s = after_s


class ServerErrorFault(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class AdminUnauthorized(Exception):
    """Admin token configured and not presented."""


class ProviderFailed(RelayError):
    """Chain mode: the node did not answer a read (upstream: a provider error, 500)."""

    status_code = 500
    code = "provider_error"


def envelope_error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"success": False, "data": None, "error": message}, status_code=status)


def rate_limited_response(after_s: int) -> JSONResponse:
    return JSONResponse(
        {
            "success": False,
            "code": 429,
            "error": "TooManyRequests",
            "message": "Too Many Requests",
            "after": after_s,
        },
        status_code=429,
        headers={"x-ratelimit-after": str(after_s)},
    )


def server_error_response(status: int) -> JSONResponse:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Server Error"
    return envelope_error(status, phrase)


def domain_error_response(exc: Exception) -> Response | None:
    """The upstream-shaped answer to an error the domain or a fault raised, if it is one."""
    if isinstance(exc, RelayError):
        if exc.status_code >= 500:
            log.error("stub.internal_error", extra={"error": exc.detail})
        return envelope_error(exc.status_code, exc.detail)
    if isinstance(exc, MalformedJson):
        return PlainTextResponse(f"Json deserialize error: {exc}", status_code=400)
    if isinstance(exc, RateLimitedFault):
        return rate_limited_response(exc.after_s)
    if isinstance(exc, ServerErrorFault):
        return server_error_response(exc.status)
    return None


async def _on_domain_error(request: Request, exc: Exception) -> Response:
    response = domain_error_response(exc)
    return response if response is not None else await _on_unexpected(request, exc)


async def _on_validation(request: Request, exc: RequestValidationError) -> Response:
    if request.url.path.startswith("/__admin"):
        fields = [
            {
                "field": ".".join(str(p) for p in e.get("loc", ()) if p != "body"),
                "message": e["msg"],
            }
            for e in exc.errors()
        ]
        return JSONResponse({"error": "validation_error", "detail": fields}, status_code=422)
    messages = "; ".join(str(error.get("msg", "invalid")) for error in exc.errors())
    return PlainTextResponse(f"Query deserialize error: {messages}", status_code=400)


async def _on_admin_unauthorized(_: Request, __: AdminUnauthorized) -> Response:
    return JSONResponse(
        {"error": "unauthorized", "detail": "admin token required"}, status_code=401
    )


async def _on_http(_: Request, exc: StarletteHTTPException) -> Response:
    # actix answers unknown routes and methods with an empty body.
    return Response(status_code=exc.status_code, headers=getattr(exc, "headers", None))


async def _on_unexpected(request: Request, _: Exception) -> Response:
    return unexpected_error_response(request.url.path)


def unexpected_error_response(path: str) -> Response:
    log.exception("stub.unhandled_error", extra={"path": path})
    return envelope_error(500, "Internal Server Error")


def install(app: FastAPI) -> None:
    for domain_error in (RelayError, MalformedJson, RateLimitedFault, ServerErrorFault):
        app.add_exception_handler(domain_error, _on_domain_error)
    app.add_exception_handler(RequestValidationError, _on_validation)  # type: ignore[arg-type]
    app.add_exception_handler(AdminUnauthorized, _on_admin_unauthorized)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _on_http)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _on_unexpected)
