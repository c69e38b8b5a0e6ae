"""``POST /api/v1/relayers/{relayer_id}/transactions`` served as plain ASGI.

This is the route a benchmark pushes thousands of times a second, and FastAPI's routing and
dependency machinery costs more than the send itself; here it is a regex match, the body, one
service call and one response. It sits inside :class:`relayer_stub.middleware.UpstreamEdge`,
so the Bearer check, trailing-slash trim and ``x-request-id`` still apply. Errors are rendered
by the same function as FastAPI's exception handlers use.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from starlette.types import ASGIApp, Receive, Scope, Send

from relayer_stub.errors import domain_error_response, unexpected_error_response
from relayer_stub.responses import JSONResponse

if TYPE_CHECKING:
    from fastapi.responses import Response

    from relayer_stub.runtime import Runtime

SEND_PATH = re.compile(r"^/api/v1/relayers/(?P<relayer_id>[^/]+)/transactions$")


async def read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


class SendTransactionRoute:
    """Answers 200 with the new record (status pending). No idempotency: every call is new."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = (
            SEND_PATH.fullmatch(scope["path"])
            if scope["type"] == "http" and scope["method"] == "POST"
            else None
        )
        if match is None:
            await self.app(scope, receive, send)
            return
        runtime: Runtime = scope["app"].state.runtime
        response: Response
        try:
            await runtime.faults.before_request(submit=True)
            body = await read_body(receive)
            data = await runtime.transactions.send(match["relayer_id"], body)
            response = JSONResponse({"success": True, "data": data, "error": None})
        except Exception as exc:
            response = domain_error_response(exc) or unexpected_error_response(scope["path"])
        await response(scope, receive, send)
