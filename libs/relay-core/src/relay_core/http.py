"""A small HTTP/1.1 client for the hot paths' own calls: the executor (one POST per message)
and SQS's three batch calls (relay_core.sqswire).

Why: through aiohttp one such request costs ~130 µs of the caller's CPU here, against ~20 µs
on a connection of this module's own (docs/performance.md, issue 18): on the consumer, the
executor's POST alone was a fifth of a message's CPU.

What it is: keep-alive connections to one origin (``http`` or ``https``), at most
``max_connections`` open, the most recently used taken first; each request written in one
piece and its answer parsed by httptools (llhttp, the parser uvicorn serves with: lengths,
chunked bodies, keep-alive rules). Not there, because these calls need none of it: redirects,
compression (none is asked for), proxies, cookies, bodies delimited by the connection's end,
pipelining, HEAD (the parser is not told a HEAD's answer has no body).

What it tells apart, because the executor's exactly-once logic rests on it: :class:`NotSent`
(no connection within the connect timeout, refused, unresolvable: the server certainly never
saw the request) from the errors once the request was written (:class:`AnswerTimeout`,
:class:`Disconnected`, :class:`BadAnswer`: the server may have acted on it). A request whose
reused connection turns out closed before any answer is sent again on a new connection only
when its method is idempotent (RFC 9112 §9.3.1.1), never a POST; if that second try finds no
connection, the request is :class:`Disconnected` (the first copy was written), not
:class:`NotSent`. A connection idle longer than ``keepalive_s`` is closed rather than reused,
so that a server's own idle timeout (5 s for the OZ Relayer's actix-web and for uvicorn)
rarely closes one under a request.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import httptools

from relay_core.slots import Slots

_IDEMPOTENT = frozenset({"GET", "PUT", "DELETE", "OPTIONS"})
_MAX_BODY = 64 * 1024 * 1024


class HttpError(ConnectionError):
    """A request that got no answer. ``sent``: whether it may have reached the server."""

    sent = True


class NotSent(HttpError):
    """No connection for the request (``timeout``: none within the connect timeout):
    certainly not received."""

    sent = False

    def __init__(self, message: str, *, timeout: bool = False) -> None:
        super().__init__(message)
        self.timeout = timeout


class AnswerTimeout(HttpError, TimeoutError):
    """Written, and no complete answer within the read timeout."""


class Disconnected(HttpError):
    """Written, and the connection was lost before the whole answer came."""


class BadAnswer(HttpError):
    """Written, and what came back was not HTTP (or too large)."""


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    headers: dict[str, str]  # names in lower case; a repeated header's values joined by ", "
    body: bytes


class _Connection(asyncio.Protocol):
    """One connection: a request at a time, its answer collected by the parser's callbacks."""

    def __init__(self, max_body: int) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.max_body = max_body
        self.answer: asyncio.Future[Response] | None = None
        self.closed = False
        self.answered = False  # a byte of the current answer has arrived
        self.idle_since = time.monotonic()
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._size = 0

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(Disconnected("the connection was closed before the whole answer came"))

    def data_received(self, data: bytes) -> None:
        if self.answer is None:  # nothing asked: a server talking out of turn
            self.close()
            return
        self.answered = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(BadAnswer(f"not an HTTP answer: {exc}"))
            self.close()

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._headers = {}
        self._body = []
        self._size = 0

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        known = self._headers.get(key)
        self._headers[key] = text if known is None else f"{known}, {text}"

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._size > self.max_body:
            self._fail(BadAnswer(f"answer larger than {self.max_body} bytes"))
            self.close()
            return
        self._body.append(body)

    def on_message_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200:  # an interim answer (100 Continue...): the final one follows
            return
        answer, self.answer = self.answer, None
        if answer is None or answer.done():
            return
        if not self.parser.should_keep_alive():
            self.close()
        answer.set_result(Response(status, self._headers, b"".join(self._body)))

    # the client's side
    def send(self, request: bytes) -> asyncio.Future[Response]:
        assert self.transport is not None
        self.answer = asyncio.get_running_loop().create_future()
        self.answered = False
        self.transport.write(request)
        return self.answer

    def expire(self, after_s: float) -> None:
        self._fail(AnswerTimeout(f"no answer within {after_s} s"))
        self.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _fail(self, error: HttpError) -> None:
        answer, self.answer = self.answer, None
        if answer is not None and not answer.done():
            answer.set_exception(error)


class HttpClient:
    """Requests to one origin (``base_url``'s scheme, host and port). Built anywhere, its
    connections opened on first use inside the running loop; :meth:`aclose` at shutdown.

    ``connect_timeout_s`` covers waiting for a free connection and opening one (TLS
    included): when it runs out the request was never sent. ``read_timeout_s`` covers the
    answer, from the request's writing to the answer's last byte (per request:
    ``timeout_s``)."""

    def __init__(
        self,
        base_url: str,
        *,
        max_connections: int = 100,
        connect_timeout_s: float = 3.0,
        read_timeout_s: float = 10.0,
        keepalive_s: float = 4.0,
        ssl_context: ssl.SSLContext | None = None,
        max_body_bytes: int = _MAX_BODY,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        default_port = self.port == (443 if parts.scheme == "https" else 80)
        shown = f"[{self.host}]" if ":" in self.host else self.host
        self.authority = shown if default_port else f"{shown}:{self.port}"
        self._ssl = (
            (ssl_context or ssl.create_default_context()) if self.scheme == "https" else None
        )
        self._connect_timeout_s = connect_timeout_s
        self._read_timeout_s = read_timeout_s
        self._keepalive_s = keepalive_s
        self._max_body = max_body_bytes
        self._idle: collections.deque[_Connection] = collections.deque()
        self._slots = Slots(max_connections)
        self._closed = False
        self.connects = 0  # (tests and the curious)

    async def request(
        self,
        method: str,
        target: str,
        *,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
        timeout_s: float | None = None,
    ) -> Response:
        """``method`` ``target`` (a path with its query) with ``headers`` (``Host`` and
        ``Content-Length`` are added) and ``body``; the answer, whatever its status."""
        if method == "HEAD":
            raise ValueError("HEAD is not supported (its answer's length would be waited for)")
        request = _request(method, target, self.authority, headers, body)
        read_timeout = self._read_timeout_s if timeout_s is None else timeout_s
        idempotent = method in _IDEMPOTENT
        resent = False
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, reused = await self._acquire()
            except NotSent as exc:
                if not resent:
                    raise
                # the first copy went out, and the server may have read it
                raise Disconnected(f"sent, then no connection to send it again: {exc}") from exc
            answer = conn.send(request)
            # (a timer on the answer itself: asyncio.timeout costs several times as much)
            timer = loop.call_later(read_timeout, conn.expire, read_timeout)
            try:
                response = await answer
            except AnswerTimeout:
                self._discard(conn)
                raise
            except Disconnected:
                self._discard(conn)
                # A kept-alive connection the server had closed as the request went out: it
                # never read it. Safe to send again only where doing it twice does no harm.
                if reused and idempotent and not resent and not conn.answered:
                    resent = True
                    continue
                raise
            except BaseException:  # cancelled, or a parse error: the connection is spent
                self._discard(conn)
                raise
            finally:
                timer.cancel()
            self._release(conn)
            return response

    async def aclose(self) -> None:
        self._closed = True
        while self._idle:
            self._discard(self._idle.pop())
        self._slots.wake_all()

    # --- the pool -----------------------------------------------------------------------

    async def _acquire(self) -> tuple[_Connection, bool]:
        """A connection, and whether it was used before."""
        deadline = time.monotonic() + self._connect_timeout_s
        while True:
            if self._closed:
                raise NotSent("the client is closed")
            now = time.monotonic()
            while self._idle:
                conn = self._idle.pop()  # the most recently used
                if not conn.closed and now - conn.idle_since < self._keepalive_s:
                    return conn, True
                self._discard(conn)
            if self._slots.take():
                try:
                    return await self._connect(deadline), False
                except BaseException:
                    self._slots.closed()
                    raise
            if not await self._slots.wait(deadline):
                raise NotSent(
                    f"no connection to {self.authority} free within {self._connect_timeout_s} s",
                    timeout=True,
                )

    async def _connect(self, deadline: float) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(max(deadline - time.monotonic(), 0)):
                _, conn = await loop.create_connection(
                    lambda: _Connection(self._max_body),
                    self.host,
                    self.port,
                    ssl=self._ssl,
                    server_hostname=self.host if self._ssl is not None else None,
                )
        except TimeoutError:
            raise NotSent(
                f"no connection to {self.authority} within {self._connect_timeout_s} s",
                timeout=True,
            ) from None
        except OSError as exc:  # refused, unreachable, name unknown, TLS refused
            raise NotSent(f"cannot connect to {self.authority}: {exc}") from exc
        self.connects += 1
        return conn

    def _release(self, conn: _Connection) -> None:
        if conn.closed or self._closed:
            self._discard(conn)
            return
        conn.idle_since = time.monotonic()
        self._idle.append(conn)
        self._slots.wake()

    def _discard(self, conn: _Connection) -> None:
        conn.close()
        self._slots.closed()


def _request(
    method: str, target: str, authority: str, headers: dict[str, str] | None, body: bytes | None
) -> bytes:
    lines = [f"{method} {target} HTTP/1.1"]
    given = headers or {}
    if "host" not in given and "Host" not in given:
        lines.append(f"host: {authority}")
    for name, value in given.items():
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
            raise ValueError(f"header {name!r}: a line break would split the request")
        lines.append(f"{name}: {value}")
    if body is not None or method in ("POST", "PUT", "PATCH"):
        lines.append(f"content-length: {len(body or b'')}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head + body if body else head


def query(params: dict[str, Any] | None) -> str:
    """``?a=1&b=2`` for ``params`` (values as text, escaped), or nothing."""
    if not params:
        return ""
    return "?" + urlencode({key: str(value) for key, value in params.items()})
