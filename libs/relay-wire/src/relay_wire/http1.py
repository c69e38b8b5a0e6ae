"""HTTP/1.1 on one connection, for relay_wire.http's client: a request's bytes (checked
before any is written: methods and header names are tokens, the target an ASCII path, no line
break or NUL in a header, values in latin-1) and an answer parsed as it arrives (httptools:
lengths, chunked bodies, keep-alive rules; a head over 64 KiB or 100 header lines is a
:class:`BadAnswer`), and the errors that tell a request never sent from one that may have
reached the server. Why and what it does not do: relay_wire.http."""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass

import httptools

MAX_BODY = 64 * 1024 * 1024
# An answer's head: more is no answer of the servers these calls go to (nginx and uvicorn
# refuse heads past 8-64 KiB), and httptools holds a header whole until its line ends.
_MAX_HEAD_BYTES = 64 * 1024
_MAX_HEADERS = 100
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110 §5.6.2
# Methods and header names found to be tokens: a process sends the same few again and again,
# so each is matched once (bounded, should names ever be built per request).
_TOKENS: set[str] = set()
_TOKENS_KEPT = 1024


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


class Connection(asyncio.Protocol):
    """One connection: a request at a time, its answer collected by the parser's callbacks."""

    def __init__(self, max_body: int) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.max_body = max_body
        self.answer: asyncio.Future[Response] | None = None
        self.closed = False
        self.answered = False  # a byte of the current answer has arrived
        self.finished = False  # the current request's final answer is complete
        self.idle_since = time.monotonic()
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._size = 0
        self._read = 0  # bytes read since the request was written
        self._header_lines = 0
        self._header_bytes = 0

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
        self._read += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(BadAnswer(f"not an HTTP answer: {exc}"))
            self.close()
            return
        # All read so far is head (no body yet, no end): a header line that does not end,
        # which httptools would hold whole, is stopped here.
        if self._read > _MAX_HEAD_BYTES and not self._size and not self.finished:
            self._head_too_large()

    # httptools callbacks
    def on_message_begin(self) -> None:
        if self.finished:  # another answer after the one asked for, in the same read
            self.close()
        self._headers = {}
        self._body = []
        self._size = 0
        self._header_lines = 0
        self._header_bytes = 0

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_lines += 1
        self._header_bytes += len(name) + len(value)
        if self._header_lines > _MAX_HEADERS or self._header_bytes > _MAX_HEAD_BYTES:
            self._head_too_large()
            return
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
        self.finished = True
        if not self.parser.should_keep_alive():
            self.close()
        answer.set_result(Response(status, self._headers, b"".join(self._body)))

    # the client's side
    def send(self, request: bytes) -> asyncio.Future[Response]:
        assert self.transport is not None
        self.answer = asyncio.get_running_loop().create_future()
        self.answered = False
        self.finished = False
        self._read = 0
        self.transport.write(request)
        return self.answer

    def expire(self, after_s: float) -> None:
        self._fail(AnswerTimeout(f"no answer within {after_s} s"))
        self.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _head_too_large(self) -> None:
        self._fail(
            BadAnswer(f"answer's head over {_MAX_HEAD_BYTES} bytes or {_MAX_HEADERS} headers")
        )
        self.close()

    def _fail(self, error: HttpError) -> None:
        answer, self.answer = self.answer, None
        if answer is not None and not answer.done():
            answer.set_exception(error)


def encode_request(
    method: str, target: str, authority: str, headers: dict[str, str] | None, body: bytes | None
) -> bytes:
    if method not in _TOKENS:
        _check_token("method", method)
    if (
        target[:1] != "/"
        or not target.isascii()
        # what would end the request line early or split it (other controls only earn a 400)
        or " " in target
        or "\r" in target
        or "\n" in target
        or "\t" in target
        or "\0" in target
    ):
        raise ValueError(f"target {target!r}: a path and query in ASCII, percent-encoded")
    lines = [f"{method} {target} HTTP/1.1"]
    given = headers or {}
    if "host" not in given and "Host" not in given:
        lines.append(f"host: {authority}")
    for name, value in given.items():
        if name not in _TOKENS:
            _check_token("header name", name)
        if "\r" in value or "\n" in value or "\0" in value:
            raise ValueError(f"header {name!r}: a line break or NUL would split the request")
        lines.append(f"{name}: {value}")
    if body is not None or method in ("POST", "PUT", "PATCH"):
        lines.append(f"content-length: {len(body or b'')}")
    try:
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    except UnicodeEncodeError:
        name = next(name for name, value in given.items() if not _latin_1(value))
        raise ValueError(f"header {name!r}: not latin-1 text (encode it, RFC 8187)") from None
    return head + body if body else head


def _check_token(kind: str, text: str) -> None:
    if not isinstance(text, str) or _TOKEN.fullmatch(text) is None:
        raise ValueError(f"{kind} {text!r} is not an HTTP token (RFC 9110 §5.6.2)")
    if len(_TOKENS) < _TOKENS_KEPT:
        _TOKENS.add(text)


def _latin_1(text: str) -> bool:
    try:
        text.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True
