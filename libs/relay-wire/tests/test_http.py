"""relay_wire.http: keep-alive requests to one origin, answers parsed whatever their framing,
and the line between a request that certainly never left and one the server may have seen."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from relay_wire import http
from relay_wire.http import AnswerTimeout, BadAnswer, Disconnected, HttpClient, NotSent

JSON = b'{"ok":true}'


class _Server(asyncio.Protocol):
    """One connection of the test server: answers by path (see ``_answer``)."""

    def __init__(self, owner: Answers) -> None:
        self.owner = owner
        self.buffer = b""
        self.served = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.owner.connections.append(self)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            head, _, rest = self.buffer.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ")
            headers = dict(line.split(": ", 1) for line in lines[1:])
            length = int(headers.get("content-length", "0"))
            if len(rest) < length:
                return
            body, self.buffer = rest[:length], rest[length:]
            self.owner.requests.append((method, target, headers, body))
            self._answer(target.partition("?")[0])
            self.served += 1

    def _answer(self, target: str) -> None:
        write = self.transport.write
        if target == "/json":
            write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n")
            write(b"content-length: %d\r\nx-twice: a\r\nx-twice: b\r\n\r\n%s" % (len(JSON), JSON))
        elif target == "/chunked":
            write(b"HTTP/1.1 201 Created\r\ntransfer-encoding: chunked\r\n\r\n")
            write(b'4\r\n{"ok\r\n7\r\n":true}\r\n0\r\n\r\n')
        elif target == "/close":
            write(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok")
        elif target == "/continue":
            write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        elif target == "/garbage":
            write(b"NOT HTTP AT ALL\r\n\r\n")
        elif target == "/big":
            write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n" + b"x" * 100)
        elif target == "/flaky" and self.served:  # hangs up on a reused connection
            self.transport.close()
        elif target == "/flaky":
            write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        elif target == "/vanish" and self.served:  # reads it, then the server goes away
            assert self.owner.server is not None
            self.owner.server.close()
            self.transport.close()
        elif target == "/slow":
            pass  # never answers
        elif target == "/trailing":  # its answer, then the start of one nobody asked for
            write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            write(b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nfor")
        elif target.startswith("/headers/"):  # /headers/<lines>/<bytes a value>
            lines, size = map(int, target.split("/")[2:])
            fields = b"".join(b"x-%d: %s\r\n" % (i, b"v" * size) for i in range(lines - 1))
            write(b"HTTP/1.1 200 OK\r\n" + fields + b"content-length: 2\r\n\r\nok")
        elif target == "/endless-header":  # a header line that never ends
            write(b"HTTP/1.1 200 OK\r\nx-long: " + b"v" * 100_000)
        else:
            write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")


class Answers:
    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self.connections: list[_Server] = []
        self.port = 0
        self.server: asyncio.Server | None = None

    async def start(self, ssl_context: ssl.SSLContext | None = None) -> Answers:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(
            lambda: _Server(self), "127.0.0.1", 0, ssl=ssl_context
        )
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        assert self.server is not None
        for conn in self.connections:
            conn.transport.abort()
        self.server.close()
        await self.server.wait_closed()


@pytest.fixture
async def server() -> AsyncIterator[Answers]:
    running = await Answers().start()
    yield running
    await running.stop()


def _client(server: Answers, **options: object) -> HttpClient:
    return HttpClient(f"http://127.0.0.1:{server.port}", **options)  # type: ignore[arg-type]


async def test_requests_share_a_kept_alive_connection_and_carry_their_headers(
    server: Answers,
) -> None:
    client = _client(server)
    for _ in range(3):
        answer = await client.request(
            "POST", "/json", headers={"authorization": "Bearer k"}, body=b'{"a":1}'
        )
        assert (answer.status, answer.body) == (200, JSON)
        assert answer.headers["content-type"] == "application/json"
        assert answer.headers["x-twice"] == "a, b"
    assert client.connects == 1
    method, target, headers, body = server.requests[0]
    assert (method, target, body) == ("POST", "/json", b'{"a":1}')
    assert headers["host"] == f"127.0.0.1:{server.port}"
    assert headers["authorization"] == "Bearer k"
    assert headers["content-length"] == "7"
    await client.aclose()


async def test_chunked_and_interim_answers_are_read_whole(server: Answers) -> None:
    client = _client(server)
    chunked = await client.request("GET", "/chunked")
    assert (chunked.status, chunked.body) == (201, b'{"ok":true}')
    interim = await client.request("GET", "/continue")
    assert (interim.status, interim.body) == (200, b"ok")
    assert client.connects == 1
    await client.aclose()


async def test_a_connection_the_server_closes_is_not_used_again(server: Answers) -> None:
    client = _client(server)
    assert (await client.request("GET", "/close")).body == b"ok"
    assert (await client.request("GET", "/json")).status == 200
    assert client.connects == 2
    await client.aclose()


async def test_a_connection_idle_past_keepalive_is_replaced(server: Answers) -> None:
    client = _client(server, keepalive_s=0.05)
    await client.request("GET", "/json")
    await asyncio.sleep(0.1)
    await client.request("GET", "/json")
    assert client.connects == 2
    await client.aclose()


async def test_a_hangup_on_a_reused_connection_is_retried_only_when_idempotent(
    server: Answers,
) -> None:
    client = _client(server)
    await client.request("GET", "/json")
    # The server hangs up on a request that comes on a used connection (as one does whose idle
    # timeout ran out as the request went out): a GET is sent again on a new connection...
    assert (await client.request("GET", "/flaky")).body == b"ok"
    assert client.connects == 2
    # ...a POST is not: the server may have read it.
    with pytest.raises(Disconnected) as raised:
        await client.request("POST", "/flaky", body=b"{}")
    assert raised.value.sent
    assert [r[0] for r in server.requests].count("POST") == 1
    await client.aclose()


async def test_a_request_sent_once_is_never_reported_not_sent(server: Answers) -> None:
    client = _client(server, connect_timeout_s=0.5)
    await client.request("GET", "/json")
    # The server reads a DELETE on the used connection and goes away unanswered: the retry
    # finds nothing listening, yet the first copy may have been acted on.
    with pytest.raises(Disconnected) as raised:
        await client.request("DELETE", "/vanish")
    assert raised.value.sent
    assert [r[0] for r in server.requests] == ["GET", "DELETE"]
    with pytest.raises(ValueError, match="HEAD"):
        await client.request("HEAD", "/json")
    await client.aclose()


async def test_nothing_listening_means_not_sent() -> None:
    free = await Answers().start()
    port = free.port
    await free.stop()
    client = HttpClient(f"http://127.0.0.1:{port}")
    with pytest.raises(NotSent) as raised:
        await client.request("POST", "/json", body=b"{}")
    assert not raised.value.sent
    assert not raised.value.timeout


async def test_no_free_connection_within_the_connect_timeout_means_not_sent(
    server: Answers,
) -> None:
    client = _client(server, max_connections=1, connect_timeout_s=0.2, read_timeout_s=5)
    holder = asyncio.create_task(client.request("GET", "/slow"))
    await asyncio.sleep(0.05)
    with pytest.raises(NotSent) as raised:
        await client.request("POST", "/json", body=b"{}")
    assert raised.value.timeout
    assert not raised.value.sent
    holder.cancel()  # a cancelled request gives its connection up
    with pytest.raises(asyncio.CancelledError):
        await holder
    assert (await client.request("GET", "/json")).status == 200
    await client.aclose()


async def test_an_answer_that_does_not_come_is_a_timeout_after_sending(server: Answers) -> None:
    client = _client(server, read_timeout_s=0.1)
    with pytest.raises(AnswerTimeout) as raised:
        await client.request("POST", "/slow", body=b"{}")
    assert raised.value.sent
    assert isinstance(raised.value, TimeoutError)
    assert (await client.request("GET", "/json", timeout_s=1.0)).status == 200
    await client.aclose()


async def test_what_is_not_http_or_too_large_is_a_bad_answer(server: Answers) -> None:
    client = _client(server, max_body_bytes=50)
    with pytest.raises(BadAnswer):
        await client.request("GET", "/garbage")
    with pytest.raises(BadAnswer, match="larger than 50 bytes"):
        await client.request("GET", "/big")
    assert (await client.request("GET", "/json")).status == 200  # on a new connection
    await client.aclose()


async def test_a_header_cannot_split_the_request(server: Answers) -> None:
    client = _client(server)
    with pytest.raises(ValueError, match="line break"):
        await client.request("GET", "/json", headers={"x-id": "a\r\nx-evil: 1"})
    assert server.requests == []
    await client.aclose()


@pytest.mark.parametrize(
    ("method", "target", "headers", "refused"),
    [
        ("GET /x HTTP/1.1\r\nx-evil: 1\r\n\r\nGET", "/json", {}, "method"),
        ("GE T", "/json", {}, "method"),
        ("", "/json", {}, "method"),
        ("GÉT", "/json", {}, "method"),
        ("GET", "/json HTTP/1.1\r\nx-evil: 1\r\n\r\nGET /x", {}, "target"),
        ("GET", "/a b", {}, "target"),
        ("GET", "/a\tb", {}, "target"),
        ("GET", "/a\x00", {}, "target"),
        ("GET", "/café", {}, "target"),
        ("GET", "", {}, "target"),
        ("GET", "json", {}, "target"),
        ("GET", "/json", {"x-evil: 1\r\nx-id": "a"}, "header name"),
        ("GET", "/json", {"x id": "a"}, "header name"),
        ("GET", "/json", {"x:id": "a"}, "header name"),
        ("GET", "/json", {"": "a"}, "header name"),
        ("GET", "/json", {"x-é": "a"}, "header name"),
        ("GET", "/json", {"x-id": "a\nx-evil: 1"}, "header 'x-id'"),
        ("GET", "/json", {"x-id": "a\x00b"}, "header 'x-id'"),
        ("GET", "/json", {"x-ok": "é", "x-id": "price in €"}, "header 'x-id'"),
    ],
)
async def test_what_would_corrupt_the_request_is_refused_before_anything_is_sent(
    server: Answers, method: str, target: str, headers: dict[str, str], refused: str
) -> None:
    client = _client(server)
    with pytest.raises(ValueError, match=refused) as raised:
        await client.request(method, target, headers=headers)
    # Said in words, not as the encoder's UnicodeEncodeError from deep in the writing.
    assert not isinstance(raised.value, UnicodeError)
    await asyncio.sleep(0.05)
    assert (client.connects, server.requests) == (0, [])
    # What is legal still goes: token names, a query, latin-1 values.
    answer = await client.request("GET", "/json?a=1&b=%20", headers={"x-Id_1.~": "é\tb"})
    assert answer.status == 200
    await client.aclose()


def test_a_host_that_cannot_be_a_host_header_is_refused_when_the_client_is_made() -> None:
    with pytest.raises(ValueError, match="punycode"):
        HttpClient("http://bücher.example/")
    with pytest.raises(ValueError, match="Host header"):
        HttpClient("http://a b/")


async def test_bytes_after_a_complete_answer_are_never_the_next_requests_answer(
    server: Answers,
) -> None:
    client = _client(server)
    assert (await client.request("GET", "/trailing")).body == b"ok"
    # What followed it would have begun the next answer on that connection: it is dropped.
    answer = await client.request("GET", "/json")
    assert (answer.status, answer.body) == (200, JSON)
    assert client.connects == 2
    await client.aclose()


async def test_a_connection_the_server_closed_while_idle_is_not_taken(server: Answers) -> None:
    client = _client(server)
    await client.request("GET", "/json")
    (idle,) = client._idle
    server.connections[0].transport.close()  # the server's idle timeout: its end is sent
    # The client's loop reads the end (the transport starts closing); its connection_lost
    # runs an iteration later. A POST taken in between would be written into nothing.
    while not idle.transport.is_closing():  # type: ignore[union-attr]
        await asyncio.sleep(0)
    answer = await client.request("POST", "/json", body=b"{}")
    assert answer.status == 200
    assert client.connects == 2
    assert [r[0] for r in server.requests] == ["GET", "POST"]
    await client.aclose()


async def test_a_connection_reset_while_idle_is_not_taken(server: Answers) -> None:
    client = _client(server)
    await client.request("GET", "/json")
    (idle,) = client._idle
    server.connections[0].transport.abort()  # a reset, not an end: no eof_received
    while not idle.transport.is_closing():  # type: ignore[union-attr]
        await asyncio.sleep(0)
    answer = await client.request("POST", "/json", body=b"{}")
    assert answer.status == 200
    assert client.connects == 2
    await client.aclose()


@pytest.mark.parametrize(
    ("target", "accepted"),
    [
        ("/headers/100/10", True),  # 100 header lines: the most there may be
        ("/headers/101/10", False),
        ("/headers/16/3900", True),  # ~62 KiB of headers
        ("/headers/20/4000", False),  # ~78 KiB
        ("/endless-header", False),
    ],
)
async def test_an_answers_head_is_bounded(server: Answers, target: str, accepted: bool) -> None:
    client = _client(server, read_timeout_s=5.0)
    if accepted:
        assert (await client.request("GET", target)).body == b"ok"
    else:
        with pytest.raises(BadAnswer, match="head over"):
            await client.request("GET", target)
    assert (await client.request("GET", "/json")).status == 200
    await client.aclose()


def test_query_strings_are_escaped() -> None:
    assert http.query(None) == ""
    assert http.query({"page": 2, "status": "a b&c"}) == "?page=2&status=a+b%26c"


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subject = ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
    curve = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]
    files = ["-keyout", str(key), "-out", str(cert)]
    subprocess.run(
        ["openssl", "req", "-x509", *curve, "-nodes", "-days", "1", *subject, *files],
        check=True,
        capture_output=True,
    )
    return cert, key


async def test_https_checks_the_servers_certificate(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert, key)
    server = await Answers().start(served)
    try:
        trusting = ssl.create_default_context(cafile=str(cert))
        client = HttpClient(f"https://127.0.0.1:{server.port}", ssl_context=trusting)
        assert (await client.request("GET", "/chunked")).body == b'{"ok":true}'
        assert (await client.request("GET", "/json")).body == JSON
        assert client.connects == 1
        await client.aclose()
        stranger = HttpClient(f"https://127.0.0.1:{server.port}")  # the system's trust only
        with pytest.raises(NotSent):
            await stranger.request("POST", "/json", body=b"{}")
    finally:
        await server.stop()


async def test_a_tls_connection_the_server_closed_while_idle_is_not_taken(
    certificate: tuple[Path, Path],
) -> None:
    cert, key = certificate
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert, key)
    server = await Answers().start(served)
    client = HttpClient(
        f"https://127.0.0.1:{server.port}", ssl_context=ssl.create_default_context(cafile=cert)
    )
    try:
        await client.request("GET", "/json")
        (idle,) = client._idle
        server.connections[0].transport.close()  # close_notify, then the end
        # The TLS shutdown takes a few loop iterations before the connection_lost.
        while not idle.transport.is_closing():  # type: ignore[union-attr]
            await asyncio.sleep(0)
        answer = await client.request("POST", "/json", body=b"{}")
        assert answer.status == 200
        assert client.connects == 2
    finally:
        await client.aclose()
        await server.stop()
