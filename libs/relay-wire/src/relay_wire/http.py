"""A small HTTP/1.1 client for the hot paths' own calls: the executor (one POST per message)
and SQS's three batch calls (relay_wire.sqswire).

Why: through aiohttp one such request costs ~130 µs of the caller's CPU here, against ~20 µs
on a connection of this module's own (docs/performance.md, issue 18): on the consumer, the
executor's POST alone was a fifth of a message's CPU.

What it is: keep-alive connections to one origin (``http`` or ``https``), at most
``max_connections`` open, the most recently used taken first; each request written in one
piece and its answer parsed by httptools (llhttp, the parser uvicorn serves with: lengths,
chunked bodies, keep-alive rules). Not there, because these calls need none of it: redirects,
compression (none is asked for), proxies, cookies, bodies delimited by the connection's end,
pipelining, HEAD (the parser is not told a HEAD's answer has no body), targets other than a
path and query (origin form), non-ASCII host names (give their punycode).

What it refuses, before a byte is written (``ValueError``): a method or header name that is
not an HTTP token, a target that is not an ASCII path (or holds a space, tab, CR, LF or NUL),
a header value with CR, LF or NUL, or one not in latin-1. What it refuses in an answer
(:class:`BadAnswer`): a head (status line and headers) over 64 KiB or with more than 100
header lines. A connection is not used again once its answer is followed by the start of
another in the same read (bytes nobody asked for would be the next request's answer; the
empty lines a parser skips between answers, RFC 9112 §2.2, are not counted), nor once its
end (EOF, a reset) has arrived while it was idle. An end still on its way when a connection
is taken is not looked for (that would be a system call per request): the resend below
covers it for idempotent methods.

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
from typing import Any
from urllib.parse import urlencode, urlsplit

from relay_wire.http1 import (
    MAX_BODY,
    AnswerTimeout,
    BadAnswer,
    Connection,
    Disconnected,
    HttpError,
    NotSent,
    Response,
    encode_request,
)
from relay_wire.slots import Slots

__all__ = [
    "AnswerTimeout",
    "BadAnswer",
    "Disconnected",
    "HttpClient",
    "HttpError",
    "NotSent",
    "Response",
    "query",
]

_IDEMPOTENT = frozenset({"GET", "PUT", "DELETE", "OPTIONS"})


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
        max_body_bytes: int = MAX_BODY,
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
        if not (self.authority.isascii() and self.authority.isprintable()) or " " in self.host:
            raise ValueError(f"not a host for the Host header (punycode it): {self.host!r}")
        self._ssl = (
            (ssl_context or ssl.create_default_context()) if self.scheme == "https" else None
        )
        self._connect_timeout_s = connect_timeout_s
        self._read_timeout_s = read_timeout_s
        self._keepalive_s = keepalive_s
        self._max_body = max_body_bytes
        self._idle: collections.deque[Connection] = collections.deque()
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
        request = encode_request(method, target, self.authority, headers, body)
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

    async def _acquire(self) -> tuple[Connection, bool]:
        """A connection, and whether it was used before."""
        deadline = time.monotonic() + self._connect_timeout_s
        while True:
            if self._closed:
                raise NotSent("the client is closed")
            now = time.monotonic()
            while self._idle:
                conn = self._idle.pop()  # the most recently used
                # Closing: its end or a reset has arrived (a TLS close_notify too), and its
                # connection_lost is still to run; a request written on it would go nowhere.
                if (
                    not conn.closed
                    and not conn.transport.is_closing()  # type: ignore[union-attr]
                    and now - conn.idle_since < self._keepalive_s
                ):
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

    async def _connect(self, deadline: float) -> Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(max(deadline - time.monotonic(), 0)):
                _, conn = await loop.create_connection(
                    lambda: Connection(self._max_body),
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

    def _release(self, conn: Connection) -> None:
        if conn.closed or self._closed:
            self._discard(conn)
            return
        conn.idle_since = time.monotonic()
        self._idle.append(conn)
        self._slots.wake()

    def _discard(self, conn: Connection) -> None:
        conn.close()
        self._slots.closed()


def query(params: dict[str, Any] | None) -> str:
    """``?a=1&b=2`` for ``params`` (values as text, escaped), or nothing."""
    if not params:
        return ""
    return "?" + urlencode({key: str(value) for key, value in params.items()})
