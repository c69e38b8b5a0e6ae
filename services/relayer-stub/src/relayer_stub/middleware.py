"""What actix does around every request upstream, as one pure-ASGI layer (cheap on the hot
path): trailing slashes are trimmed (``NormalizePath::trim``), ``x-request-id`` is echoed or
generated, and every ``/api`` path but health and readiness needs the Bearer key (so an
unauthenticated request gets 401 even on an unknown route, as upstream's middleware does)."""

from __future__ import annotations

import hmac

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from relayer_stub.transactions.models import new_uuid4

PUBLIC_PATHS = frozenset({"/api/v1/health", "/api/v1/ready"})
UNAUTHORIZED_BODY = orjson.dumps(
    {"success": False, "code": 401, "error": "Unauthorized", "message": "Unauthorized"}
)


def bearer_token(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    """The token of exactly one ``Authorization: Bearer <token>`` header, as upstream checks."""
    values = [value for name, value in headers if name == b"authorization"]
    if len(values) != 1 or not values[0].startswith(b"Bearer "):
        return None
    token = values[0][len(b"Bearer ") :]
    if not token or b" " in token:
        return None
    return token


def token_matches(token: bytes | None, expected: str) -> bool:
    return token is not None and hmac.compare_digest(token, expected.encode())


class UpstreamEdge:
    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self.api_key = api_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        if len(path) > 1 and path.endswith("/"):
            path = path.rstrip("/") or "/"
            scope = dict(scope, path=path, raw_path=path.encode())
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        request_id = next((value for name, value in headers if name == b"x-request-id"), b"")
        if not request_id:
            request_id = new_uuid4().encode()

        if (
            path.startswith("/api/")
            and path not in PUBLIC_PATHS
            and not token_matches(bearer_token(headers), self.api_key)
        ):
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(UNAUTHORIZED_BODY)).encode()),
                        (b"x-request-id", request_id),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": UNAUTHORIZED_BODY})
            return

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (b"x-request-id", request_id)]
            await send(message)

        await self.app(scope, receive, send_with_id)
