"""A small Redis client for the status cache's own commands: GET on every status read served
from Redis, EVALSHA for every batch of status writes, SCRIPT LOAD when Redis forgot the
script.

Why: through redis-py one GET costs ~95 µs of the caller's CPU here (its pool, retry and
timeout wrappers, observability hooks), against ~20 µs on a connection of this module's own
(docs/performance.md, issue 18): most of the CPU of a status read answered from Redis.

What it is: one connection, opened on first use (``redis://`` or ``rediss://``, with the
URL's user, password and database), on which commands are pipelined: each is written at once
and its answer is the next one to come back (RESP2), read by hiredis's parser (the C reader
redis-py itself uses when installed: ~0.13 µs a GET answer against ~0.66 µs for the Python
one this module had, ~0.3 µs against ~6 µs for a script's array of ten). A command without an
answer within the timeout, or a connection that breaks, fails every command waiting on it and
closes it (an answer may still be on its way: the connection is out of step); the next
command opens a new one.

Errors are redis-py's exceptions, named from the error's code as redis-py names them
(``NoScriptError``, ``ReadOnlyError``, ``BusyLoadingError``, ``ResponseError``...; and
``ConnectionError``, ``TimeoutError``), so callers handle them as they did. An error inside
an array answer (a script's ``redis.pcall``, a transaction's) fails its command the same way,
with the first such error, where redis-py would put the exception object in the list: no
caller here wants a partial answer, nor to find an exception counted as a value. An error
that says this server cannot serve the connection's commands (``READONLY``: a primary became
a replica in a failover; ``LOADING``; ``MASTERDOWN``; a connection refused as too many)
retires the connection: the next command connects anew (and so finds the name's new
primary), and the retired one is closed once the answers already on their way have come.
What it does not do: wait or retry after such an error (the caller's next command goes to a
new connection), RESP3, pub/sub. Everything else Relay asks of Redis (the rate limiter,
readiness) stays on redis-py.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
from typing import Any
from urllib.parse import unquote, urlsplit

import hiredis
from redis._parsers import BaseParser
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MasterDownError, ReadOnlyError
from redis.exceptions import TimeoutError as RedisTimeoutError

# Errors after which this connection's commands will keep failing (ConnectionError includes
# BusyLoadingError, LOADING): a new connection may reach a server that can serve them.
_RETIRING = (RedisConnectionError, ReadOnlyError, MasterDownError)


class RespClient:
    def __init__(self, url: str, timeout_s: float) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("redis", "rediss"):
            raise ValueError(f"not a redis:// or rediss:// URL: {parts.scheme}://...")
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or 6379
        self._ssl = ssl.create_default_context() if parts.scheme == "rediss" else None
        self._username = unquote(parts.username) if parts.username else None
        self._password = unquote(parts.password) if parts.password else None
        path = parts.path.strip("/")
        self._db = int(path) if path else 0
        self._timeout_s = timeout_s
        self._conn: _Connection | None = None
        self._opening: asyncio.Future[_Connection] | None = None
        self.connects = 0  # (tests and the curious)

    async def get(self, key: str) -> bytes | None:
        return await self.execute("GET", key)

    async def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> Any:
        return await self.execute("EVALSHA", sha, numkeys, *keys_and_args)

    async def script_load(self, script: str) -> str:
        return (await self.execute("SCRIPT", "LOAD", script)).decode()

    async def execute(self, *args: Any) -> Any:
        conn = self._conn if self._conn is not None and self._conn.usable else await self._open()
        return await conn.call(_command(args), self._timeout_s)

    async def aclose(self) -> None:
        if self._opening is not None:  # a connect under way: its connection is not kept
            self._opening.add_done_callback(self._close_opened)
        if self._conn is not None:
            self._conn.close(RedisConnectionError("the client is closed"))
            self._conn = None

    def _close_opened(self, opening: asyncio.Future[_Connection]) -> None:
        if opening.cancelled() or opening.exception() is not None:
            return
        conn = opening.result()
        conn.close(RedisConnectionError("the client is closed"))
        if self._conn is conn:
            self._conn = None

    async def _open(self) -> _Connection:
        if self._opening is None:  # one connection made, however many commands wait for it
            self._opening = asyncio.ensure_future(self._connect())
            self._opening.add_done_callback(self._opened)
        return await asyncio.shield(self._opening)

    def _opened(self, opening: asyncio.Future[_Connection]) -> None:
        """A connect ended, whoever still waits for it: the next command tries afresh."""
        if self._opening is opening:
            self._opening = None
        if not opening.cancelled():
            opening.exception()  # (retrieved: every waiter may have left)

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        where = f"Redis at {self._host}:{self._port}"
        conn: _Connection | None = None
        try:
            async with asyncio.timeout(self._timeout_s):
                _, conn = await loop.create_connection(
                    _Connection,
                    self._host,
                    self._port,
                    ssl=self._ssl,
                    server_hostname=self._host if self._ssl is not None else None,
                )
                if self._password is not None:
                    who = [self._username] if self._username else []
                    await conn.call(_command(["AUTH", *who, self._password]), self._timeout_s)
                if self._db:
                    await conn.call(_command(["SELECT", self._db]), self._timeout_s)
        except BaseException as exc:
            if conn is not None:
                conn.close(RedisConnectionError(f"{where}: the connection failed"))
            if isinstance(exc, TimeoutError):  # (asyncio's: the builtin)
                raise RedisTimeoutError(f"{where}: no connection in time") from exc
            if isinstance(exc, OSError):
                raise RedisConnectionError(f"{where}: {exc}") from exc
            raise
        self.connects += 1
        self._conn = conn
        return conn


class _Connection(asyncio.Protocol):
    """One connection: commands written as they come, answers matched to them in order."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.waiting: collections.deque[asyncio.Future[Any]] = collections.deque()
        self.usable = True
        # The error replies of the answer being read, in order, nested ones included: hiredis
        # builds each through _error, so an answer without one costs no search.
        self._errors: list[Exception] = []
        self._reader = hiredis.Reader(replyError=self._error)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(RedisConnectionError("Redis closed the connection"))

    def data_received(self, data: bytes) -> None:
        reader = self._reader
        reader.feed(data)
        while self.waiting:
            try:
                answer = reader.gets()
            except hiredis.ProtocolError as exc:
                self.close(RedisConnectionError(f"not a Redis answer: {exc}"))
                return
            if answer is False:  # incomplete: wait for more
                return
            waiter = self.waiting.popleft()
            if self._errors:
                error = self._errors[0]
                self._errors.clear()
                if not waiter.done():
                    waiter.set_exception(error)
                if isinstance(error, _RETIRING):
                    self.usable = False
            elif not waiter.done():
                waiter.set_result(answer)
        if reader.has_data():  # an answer nobody asked for: out of step
            self.close(RedisConnectionError("Redis answered what was not asked"))
        elif not self.usable and self.transport is not None:  # retired, and nothing to come
            self.transport.close()

    def _error(self, message: str) -> Exception:
        error: Exception = BaseParser.parse_error(message)
        self._errors.append(error)
        return error

    async def call(self, command: bytes, timeout_s: float) -> Any:
        if not self.usable or self.transport is None:
            raise RedisConnectionError("the connection to Redis is closed")
        waiter = asyncio.get_running_loop().create_future()
        self.waiting.append(waiter)
        self.transport.write(command)
        timer = asyncio.get_running_loop().call_later(timeout_s, self._expire, waiter, timeout_s)
        try:
            return await waiter
        finally:
            timer.cancel()

    def _expire(self, waiter: asyncio.Future[Any], timeout_s: float) -> None:
        if not waiter.done():  # its answer may still come, behind the others: out of step
            self.close(RedisTimeoutError(f"Redis did not answer within {timeout_s} s"))

    def close(self, error: Exception) -> None:
        self._fail(error)
        if self.transport is not None:
            self.transport.abort()

    def _fail(self, error: Exception) -> None:
        self.usable = False
        while self.waiting:
            waiter = self.waiting.popleft()
            if not waiter.done():
                waiter.set_exception(error)


def _command(args: Any) -> bytes:
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        if isinstance(arg, bytes):
            value = arg
        elif isinstance(arg, str):
            value = arg.encode()
        elif isinstance(arg, int | float):
            value = repr(arg).encode()
        else:
            raise TypeError(f"a Redis argument must be text, bytes or a number, not {type(arg)}")
        parts.append(b"$%d\r\n%s\r\n" % (len(value), value))
    return b"".join(parts)
