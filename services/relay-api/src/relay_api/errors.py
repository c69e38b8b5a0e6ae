"""Every error leaves as ``{"error": code, "detail": message}``; nothing else, no traces."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from relay_api.relay.schemas import BEYOND_SCHEMA
from relay_api.responses import Json
from relay_core.errors import RelayError
from relay_wire.statements import code_of

log = logging.getLogger(__name__)


def error_response(status: int, code: str, detail: str, **extra: Any) -> Json:
    return Json({"error": code, "detail": detail, **extra}, status_code=status)


def _field(loc: tuple[Any, ...]) -> str:
    parts = [str(part) for part in loc if part not in ("body",)]
    return ".".join(parts) or "body"


def _validation_message(error: dict[str, Any]) -> str:
    kind = error.get("type", "")
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "missing":
        return "is required"
    message = str(error.get("msg", "is invalid"))
    return message.removeprefix("Value error, ")


async def _on_validation(_: Request, exc: RequestValidationError) -> Json:
    errors = exc.errors()
    if any(error.get("type") == "json_invalid" for error in errors):
        return error_response(400, "malformed_json", "request body is not valid JSON")
    fields = [
        {"field": _field(tuple(error.get("loc", ()))), "message": _validation_message(error)}
        for error in errors
    ]
    detail = "; ".join(f"{item['field']}: {item['message']}" for item in fields)
    if all(error.get("type") == BEYOND_SCHEMA for error in errors):
        return error_response(400, "bad_request", detail, fields=fields)
    return error_response(422, "validation_error", detail, fields=fields)


async def _on_relay_error(_: Request, exc: RelayError) -> Json:
    response = error_response(exc.status_code, exc.code, exc.detail)
    response.headers.update(exc.headers)
    return response


async def _on_http(request: Request, exc: StarletteHTTPException) -> Json:
    codes = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}
    response = error_response(
        exc.status_code, codes.get(exc.status_code, "http_error"), str(exc.detail)
    )
    response.headers.update(exc.headers or {})
    if exc.status_code == 405:
        response.headers["Allow"] = ", ".join(_allowed_methods(request))
    return response


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route serves on this path (Starlette names only the first route's,
    and two routes may share a path: GET and PATCH of an admin client)."""
    allowed: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches(request.scope)
        if match != Match.NONE:
            allowed |= set(getattr(route, "methods", None) or ())
    return sorted(allowed)


async def _on_database(request: Request, exc: Exception) -> Json:
    if isinstance(exc, IntegrityError):
        return error_response(409, "conflict", "the request conflicts with an existing record")
    log.error(
        "api.database_unavailable",
        extra={
            "path": request.url.path,
            "error": type(getattr(exc, "orig", exc)).__name__,
            # the server's error number (1205: a lock wait timed out), if it answered
            "code": code_of(exc) if isinstance(exc, DBAPIError) else None,
        },
    )
    return error_response(503, "service_unavailable", "the database is unavailable; retry later")


async def _on_unexpected(request: Request, exc: Exception) -> Json:
    if isinstance(exc, OSError | TimeoutError):
        return await _on_database(request, exc)
    log.exception("api.unhandled_error", extra={"path": request.url.path})
    return error_response(500, "internal_error", "internal error")


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _on_validation)  # type: ignore[arg-type]
    app.add_exception_handler(RelayError, _on_relay_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _on_http)  # type: ignore[arg-type]
    app.add_exception_handler(DBAPIError, _on_database)
    app.add_exception_handler(PoolTimeout, _on_database)
    app.add_exception_handler(Exception, _on_unexpected)
