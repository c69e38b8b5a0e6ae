"""The hot routes without FastAPI's request machinery, when the request is well-formed.

Routing, dependency resolution and parameter parsing cost ~0.12-0.14 ms of CPU per request
here against ~0.01 ms for reading and validating the request directly (docs/performance.md,
issue 18): a sixth of the accept path and most of a status answered from Redis.
:class:`FastPath` answers ``POST /api/v1/relay/direct`` when it is plainly well-formed (JSON
content type, a body that validates as ``DirectRequest``) and ``GET
/api/v1/relay/status/{transactionId}`` when the id is a UUID in its usual form, by running
exactly what the routes run (``relay_api.relay.endpoints.accept_direct`` and ``read_status``)
with the same caller check (``relay_api.deps.get_caller``), and ``POST
/api/v1/webhooks/oz-relayer`` always (``relay_api.webhooks.endpoints.receive``, the route's
work: the executor's four webhooks per transaction are most of the API's requests in chain
mode), and ``POST /api/v1/relay/batch`` when its body validates as ``BatchRequest``, parsed
and validated in one step from the bytes (``submit_batch``; FastAPI's JSON parse and
validation from Python objects cost twice as much for a batch of 100); an error on the way is
rendered by the app's own exception handlers. Anything else (a
malformed body or id, another content type, any other route) goes to the FastAPI app
untouched, with the body it already read handed back, so every refusal is the one the app
has always given.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from fastapi import FastAPI
from pydantic import ValidationError
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from relay_api import deps
from relay_api.auth.service import Caller
from relay_api.relay import endpoints
from relay_api.relay.schemas import BatchRequest, DirectRequest
from relay_api.webhooks import endpoints as webhooks

SUBMIT = "/api/v1/relay/direct"
BATCH = "/api/v1/relay/batch"
STATUS = "/api/v1/relay/status/{transactionId}"
WEBHOOK = "/api/v1/webhooks/oz-relayer"
_STATUS_PREFIX = "/api/v1/relay/status/"
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


class FastPath:
    def __init__(self, app: ASGIApp, fastapi: FastAPI) -> None:
        self.app = app
        self._fastapi = fastapi
        self.served = self.passed = 0  # (tests and the curious)
        routes = {getattr(route, "path", None): route for route in endpoints.router.routes}
        self._submit_route, self._status_route = routes[SUBMIT], routes[STATUS]
        self._batch_route = routes[BATCH]
        (self._webhook_route,) = webhooks.router.routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            method, path = scope["method"], scope["path"]
            if method == "POST" and path == SUBMIT:
                await self._submit(scope, receive, send)
                return
            if method == "GET" and path.startswith(_STATUS_PREFIX):
                await self._status(scope, receive, send, path[len(_STATUS_PREFIX) :])
                return
            if method == "POST" and path == WEBHOOK:
                await self._webhook(scope, receive, send)
                return
            if method == "POST" and path == BATCH:
                await self._submit(scope, receive, send, batch=True)
                return
        await self.app(scope, receive, send)

    async def _status(self, scope: Scope, receive: Receive, send: Send, given: str) -> None:
        if not _UUID.fullmatch(given):
            self.passed += 1
            await self.app(scope, receive, send)
            return
        transaction_id = given.lower()  # str(uuid.UUID(given)), without the object
        await self._serve(
            Request(scope, receive),
            self._status_route,
            lambda caller, runtime: endpoints.read_status(transaction_id, caller, runtime),
            send,
        )

    async def _submit(
        self, scope: Scope, receive: Receive, send: Send, *, batch: bool = False
    ) -> None:
        try:
            body = await _read_body(receive)
        except Exception as exc:  # a body over the limit (BodySizeLimit), as the app renders it
            refusal = await self._handled(Request(scope, receive), exc)
            await refusal(scope, receive, send)
            return
        key = _header(scope, b"idempotency-key")
        request = Request(scope, _replay(body, receive))
        if batch:
            batch_model = _well_formed_batch(scope, body)
            if batch_model is not None:
                await self._serve(
                    request,
                    self._batch_route,
                    lambda caller, runtime: endpoints.submit_batch(
                        batch_model, caller, runtime, key
                    ),
                    send,
                )
                return
        else:
            body_model = _well_formed(scope, body)
            if body_model is not None:
                await self._serve(
                    request,
                    self._submit_route,
                    lambda caller, runtime: endpoints.accept_direct(
                        body_model, caller, runtime, key
                    ),
                    send,
                )
                return
        self.passed += 1
        await self.app(scope, _replay(body, receive), send)

    async def _webhook(self, scope: Scope, receive: Receive, send: Send) -> None:
        """An executor webhook: no caller (the body's signature is checked instead)."""
        self.served += 1
        scope["route"] = self._webhook_route
        request = Request(scope, receive)
        try:
            raw = await _read_body(receive)
            response = await webhooks.receive(
                request.app.state.runtime, raw, _header(scope, b"x-signature")
            )
        except Exception as exc:
            response = await self._handled(request, exc)
        await response(scope, receive, send)

    async def _serve(
        self,
        request: Request,
        route: Any,
        work: Callable[[Caller, Any], Awaitable[Any]],
        send: Send,
    ) -> None:
        """The route's ``work`` for the checked caller, or the app's answer to what failed."""
        self.served += 1
        scope = request.scope
        scope["route"] = route  # the route template for metrics and logs
        try:
            runtime = request.app.state.runtime
            caller = await deps.get_caller(request, runtime, _header(scope, b"x-api-key"))
            response = await work(caller, runtime)
        except Exception as exc:
            response = await self._handled(request, exc)
        await response(scope, request.receive, send)

    async def _handled(self, request: Request, exc: Exception) -> Any:
        """The response the app's exception handlers give ``exc`` (the most specific)."""
        handlers = self._fastapi.exception_handlers
        for kind in type(exc).__mro__:
            handler = handlers.get(kind)
            if handler is not None:
                return await handler(request, exc)  # type: ignore[misc]
        raise exc


def _well_formed(scope: Scope, body: bytes) -> DirectRequest | None:
    if not _json(scope):
        return None
    try:
        return DirectRequest.model_validate(orjson.loads(body))
    except (orjson.JSONDecodeError, ValidationError, ValueError, TypeError):
        return None


def _well_formed_batch(scope: Scope, body: bytes) -> BatchRequest | None:
    if not _json(scope):
        return None
    try:
        return BatchRequest.model_validate_json(body)
    except (ValidationError, ValueError, TypeError):
        return None


def _json(scope: Scope) -> bool:
    content_type = _header(scope, b"content-type") or ""
    return content_type.split(";", 1)[0].strip().lower() == "application/json"


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` again from the start: the body once, then whatever comes next."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
