"""Pure ASGI middleware: the body size limit (refuses early on Content-Length, counts the bytes
of chunked bodies as they arrive) and the request's id, trace and latency (:class:`Observe`)."""

from __future__ import annotations

import time

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from relay_api.metrics import REQUEST_SECONDS
from relay_core import jsonutil, tracing


class BodySizeLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    too_large = int(value) > self.max_bytes
                except ValueError:
                    too_large = False
                if too_large:
                    await self._reject(send)
                    return
        seen = 0
        response_started = False

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    # FastAPI lets HTTPException through its body parsing; the app's handler
                    # renders it as {error, detail}.
                    raise HTTPException(413, self.detail)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal response_started
            if message["type"] == "http.response.start":
                response_started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except HTTPException as exc:
            if exc.status_code != 413 or response_started:
                raise
            await self._reject(send)

    @property
    def detail(self) -> str:
        return f"request body exceeds {self.max_bytes} bytes"

    async def _reject(self, send: Send) -> None:
        body = jsonutil.dumps({"error": "payload_too_large", "detail": self.detail}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


class Observe:
    """Every HTTP request gets a request id and a trace (``relay_core.tracing``): the
    client's well-formed ``X-Request-Id`` and valid ``traceparent`` are kept, anything else is
    replaced. The id comes back in ``X-Request-Id``; the request's latency goes into the
    histogram by method, route template (never the raw path) and status."""

    _METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        request_id = traceparent = None
        for name, value in scope.get("headers", ()):
            if name == b"x-request-id":
                request_id = value.decode("latin-1")
            elif name == b"traceparent":
                traceparent = value.decode("latin-1")
        method = scope["method"]
        trace = tracing.begin(request_id, traceparent, name=f"{method} request", kind="server")
        token = tracing.activate(trace)
        id_header = (b"x-request-id", trace.request_id.encode())
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), id_header]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            label = method if method in self._METHODS else "other"
            REQUEST_SECONDS.observe(label, route, str(status), time.perf_counter() - started)
            tracing.deactivate(token)
            if trace.span is not None:
                trace.span.update_name(f"{method} {route}")
                attributes = {"http.route": route, "http.response.status_code": status}
                tracing.finish(trace, attributes=attributes)
