"""What the OpenAPI document says about errors and authentication: every error status a route
can answer, with the body it really sends (``{"error", "detail"}``, plus ``fields`` on 422),
and the ``X-API-Key`` scheme."""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI
from fastapi.security import APIKeyHeader
from pydantic import BaseModel, Field

from relay_api import examples

API_KEY = APIKeyHeader(
    name="X-API-Key",
    scheme_name="ApiKey",
    description="A client's key (`relay keys create`), which submits nothing until an admin "
    "grants it a spend policy; an operator's or admin's key (`--role operator|admin`) for "
    "/api/v1/admin, which submits nothing.",
    auto_error=False,  # a missing key is answered by the API's own 401 body
)


# The executor's webhooks authenticate their body, not a key: stated as a scheme so that the
# document says what a 401 there means (a client of the API never calls it).
WEBHOOK_SIGNATURE = APIKeyHeader(
    name="X-Signature",
    scheme_name="WebhookSignature",
    description="The executor's: base64 HMAC-SHA256 of the raw body with the webhook signing "
    "key (RELAY_WEBHOOK_SIGNING_KEY)",
    auto_error=False,  # a missing or wrong signature is answered by the route's own 401
)


class ErrorBody(BaseModel):
    error: str = Field(description="stable machine-readable code", examples=["bad_request"])
    detail: str = Field(
        description="what was wrong, naming the field", examples=["gasLimit: must be ..."]
    )


class FieldError(BaseModel):
    field: str
    message: str


class ValidationErrorBody(ErrorBody):
    fields: list[FieldError] = Field(description="each field and what is wrong with it")


_DESCRIPTIONS = {
    400: "A semantic error naming the field, or a body that is not JSON",
    401: "Missing, unknown or revoked X-API-Key",
    403: "Not allowed for this key",
    404: "Not found",
    409: "Conflicts with an earlier request",
    413: "Body larger than the configured limit",
    415: "Content-Type is not application/json",
    422: "Schema error naming each field",
    429: "Over the rate limit; retry after Retry-After seconds",
    503: "A dependency (the database) is unavailable; nothing was written",
}

_RATE_HEADERS = {
    name: {"description": text, "schema": {"type": "string"}}
    for name, text in (
        ("Retry-After", "seconds until a request would be allowed"),
        ("RateLimit-Limit", "the bucket's size (burst)"),
        ("RateLimit-Remaining", "requests left in the bucket"),
        ("RateLimit-Reset", "seconds until the bucket is full"),
    )
}

AUTHENTICATED = (401, 429, 503)  # any route behind X-API-Key
WITH_BODY = (400, 413, 415, 422)  # any route taking a JSON body


def errors(*codes: int, notes: dict[int, str] | None = None) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` of a route for these error statuses; ``notes`` overrides a
    description with what the status means on that route."""
    notes = notes or {}
    documented: dict[int | str, dict[str, Any]] = {}
    for code in sorted(set(codes) | set(notes)):
        entry: dict[str, Any] = {
            "model": ValidationErrorBody if code == 422 else ErrorBody,
            "description": notes.get(code, _DESCRIPTIONS.get(code, "Error")),
        }
        if code == 429:
            entry["headers"] = _RATE_HEADERS
        documented[code] = entry
    return documented


def install(app: FastAPI) -> None:
    """The app's document is FastAPI's with an example beside every request and response body
    (``relay_api.examples``), the executor webhook's body described, and no schema left that
    nothing uses (FastAPI's default 422 body, which this API never sends)."""
    generate = app.openapi

    def document() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = generate()
            _with_examples(spec)
            _without_unused_schemas(spec)
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = document  # type: ignore[method-assign]


def _with_examples(spec: dict[str, Any]) -> None:
    for operations in spec["paths"].values():
        for operation in operations.values():
            if operation.get("operationId") == "receiveExecutorWebhook":
                operation.setdefault("requestBody", _EXECUTOR_WEBHOOK_BODY)
            for media in operation.get("requestBody", {}).get("content", {}).values():
                _example(media)
            for status, response in operation["responses"].items():
                for media in response.get("content", {}).values():
                    _example(media, int(status))


def _example(media: dict[str, Any], status: int | None = None) -> None:
    """The media type's example: the error body of its status, else its schema's."""
    if "example" in media:
        return
    name = media["schema"]["$ref"].rsplit("/", 1)[1]
    if status is not None and status >= 400 and name in ("ErrorBody", "ValidationErrorBody"):
        media["example"] = examples.ERRORS[status]
    else:
        media["example"] = examples.BODIES[name]


def _without_unused_schemas(spec: dict[str, Any]) -> None:
    schemas = spec["components"]["schemas"]
    while True:
        text = json.dumps({**spec, "components": {**spec["components"], "schemas": {}}})
        text += json.dumps(schemas)
        unused = [name for name in schemas if f'"#/components/schemas/{name}"' not in text]
        if not unused:
            return
        for name in unused:
            del schemas[name]


_EXECUTOR_WEBHOOK_BODY = {
    "required": True,
    "description": "The OpenZeppelin Relayer's notification, signed: base64 HMAC-SHA256 of "
    "the raw body with RELAY_WEBHOOK_SIGNING_KEY in X-Signature. Unknown fields are ignored.",
    "content": {
        "application/json": {
            "schema": {"type": "object", "additionalProperties": True},
            "example": examples.EXECUTOR_WEBHOOK,
        }
    },
}
