"""Count database round trips from outside the application (benchmark processes only).

Every statement, COMMIT, ROLLBACK (including the pool's reset-on-return) and ping that
SQLAlchemy sends through its asyncio DBAPI adapter passes one of the methods wrapped here;
each is one request/response exchange with the server. Calls are attributed to the HTTP
request that caused them (a context variable set by :class:`CountingMiddleware`) or to
``background`` (publisher, sweeper, lifespan). New connections are counted apart: their
handshake is not per-request work once the pool is warm.
"""

from __future__ import annotations

import contextvars
import json
from collections import Counter
from typing import Any

from sqlalchemy import event
from sqlalchemy.connectors import asyncio as sa_asyncio
from sqlalchemy.pool import Pool

_scope: contextvars.ContextVar[str] = contextvars.ContextVar("bench_db_scope", default="background")


class Counts:
    def __init__(self) -> None:
        self.by_scope: dict[str, Counter[str]] = {"request": Counter(), "background": Counter()}
        self.requests: Counter[str] = Counter()
        self.connects = 0

    def reset(self) -> None:
        self.__init__()  # type: ignore[misc]

    def add(self, kind: str) -> None:
        self.by_scope[_scope.get()][kind] += 1

    def snapshot(self) -> dict[str, Any]:
        return {
            "round_trips": {scope: dict(c) for scope, c in self.by_scope.items()},
            "totals": {scope: sum(c.values()) for scope, c in self.by_scope.items()},
            "http_requests": dict(self.requests),
            "connects": self.connects,
        }


COUNTS = Counts()


def _kind(operation: Any) -> str:
    words = str(operation).lstrip().split(None, 3)
    verb = words[0].upper() if words else "?"
    if verb in ("INSERT", "DELETE") and len(words) > 2:
        return f"{verb} {words[2].strip('`')}"
    if verb == "UPDATE" and len(words) > 1:
        return f"UPDATE {words[1].strip('`')}"
    return verb


def install() -> None:
    """Wrap the adapter methods (idempotent)."""
    cursor_cls: Any = sa_asyncio.AsyncAdapt_dbapi_cursor
    connection_cls: Any = sa_asyncio.AsyncAdapt_dbapi_connection
    if getattr(cursor_cls, "_bench_counted", False):
        return
    cursor_cls._bench_counted = True

    execute, executemany = cursor_cls.execute, cursor_cls.executemany
    commit, rollback = connection_cls.commit, connection_cls.rollback

    def counted_execute(self: Any, operation: Any, parameters: Any = None) -> Any:
        COUNTS.add(_kind(operation))
        return execute(self, operation, parameters)

    def counted_executemany(self: Any, operation: Any, seq: Any) -> Any:
        COUNTS.add(_kind(operation) + " (executemany)")
        return executemany(self, operation, seq)

    def counted_commit(self: Any) -> None:
        COUNTS.add("COMMIT")
        commit(self)

    def counted_rollback(self: Any) -> None:
        COUNTS.add("ROLLBACK")
        rollback(self)

    cursor_cls.execute = counted_execute
    cursor_cls.executemany = counted_executemany
    connection_cls.commit = counted_commit
    connection_cls.rollback = counted_rollback
    try:
        from sqlalchemy.dialects.mysql.asyncmy import AsyncAdapt_asyncmy_connection

        ping = AsyncAdapt_asyncmy_connection.ping

        def counted_ping(self: Any, reconnect: bool = False) -> None:
            COUNTS.add("PING")
            ping(self, reconnect)

        AsyncAdapt_asyncmy_connection.ping = counted_ping  # type: ignore[method-assign]
    except ImportError:  # pragma: no cover - asyncmy is a dependency of relay-core
        pass

    from relay_wire import direct, statements

    direct_send, direct_connect = statements._send, direct.DirectPool._connect
    direct_rollback = direct.DirectPool._rollback

    async def counted_direct(conn: Any, sql: str, args: Any, **options: Any) -> Any:
        # One round trip, however many statements it carries: named by all of them, a run
        # of the same one as "xN" (a group commit's compare-and-sets).
        kinds: list[list[Any]] = []
        for part in sql.split(";"):
            kind = _kind(part)
            if kinds and kinds[-1][0] == kind:
                kinds[-1][1] += 1
            else:
                kinds.append([kind, 1])
        COUNTS.add("+".join(k if n == 1 else f"{k} x{n}" for k, n in kinds))
        return await direct_send(conn, sql, args, **options)

    async def counted_connect(self: Any) -> Any:
        COUNTS.connects += 1
        return await direct_connect(self)

    async def counted_direct_rollback(self: Any, conn: Any) -> None:
        COUNTS.add("ROLLBACK")
        await direct_rollback(self, conn)

    direct.DirectPool._rollback = counted_direct_rollback  # type: ignore[method-assign]
    statements._send = counted_direct  # type: ignore[assignment]
    direct.DirectPool._connect = counted_connect  # type: ignore[method-assign]

    @event.listens_for(Pool, "connect")
    def _connected(dbapi_connection: Any, record: Any) -> None:
        COUNTS.connects += 1


class CountingMiddleware:
    """ASGI wrapper: marks DB calls made while serving a request, and serves the counters at
    ``GET /__bench/db`` and ``POST /__bench/db/reset`` (benchmark launcher only)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if path.startswith("/__bench/db"):
            if path.endswith("/reset"):
                COUNTS.reset()
            await send_json(send, COUNTS.snapshot())
            return
        status_holder: list[int] = []

        async def send_wrapper(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status_holder.append(int(message["status"]))
            await send(message)

        token = _scope.set("request")
        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            _scope.reset(token)
            status = status_holder[0] if status_holder else 0
            COUNTS.requests[f"{scope['method']} {_route(path)} {status}"] += 1


async def send_json(send: Any, payload: Any) -> None:
    """A 200 JSON answer from a benchmark-only ASGI wrapper."""
    body = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _route(path: str) -> str:
    parts = path.split("/")
    if len(parts) > 5 and parts[4] == "status":
        return "/".join(parts[:5]) + "/{id}"
    return path
