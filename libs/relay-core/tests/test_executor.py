"""The executor client classifies every failure by what it proves about the executor's state:
certainly not created (safe to resend) or in doubt (must be looked up first)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from relay_core import tracing
from relay_core.executor import ErrorKind, ExecutorClient, ExecutorError
from relay_core.metrics import EXECUTOR_SECONDS

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
PAYLOAD = {"to": "0x" + "ab" * 20, "data": "0x", "value": "0", "speed": "fast"}


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head + (await reader.readexactly(length) if length else b"")


def _answer(status: int, body: object, extra: str = "") -> Handler:
    raw = json.dumps(body).encode()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                await _read_request(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            writer.write(
                f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n{extra}"
                f"Content-Length: {len(raw)}\r\n\r\n".encode()
                + raw
            )
            await writer.drain()
        writer.close()

    return handle


async def _hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await _read_request(reader)
    await reader.read()  # no answer; ends when the client gives up and closes
    writer.close()


async def _drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await _read_request(reader)  # the request arrived whole; the answer never comes
    writer.transport.abort()


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Awaitable[str]]]:
    servers: list[asyncio.Server] = []

    async def start(handler: Handler) -> str:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        servers.append(server)
        port = server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    yield start
    for server in servers:
        server.close()


async def _submit_error(url: str, **kwargs: float) -> ExecutorError:
    client = ExecutorClient(url, "key", "relayer-1", **kwargs)  # type: ignore[arg-type]
    try:
        with pytest.raises(ExecutorError) as caught:
            await client.submit(PAYLOAD)
    finally:
        await client.aclose()
    return caught.value


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


ENVELOPE_OK = {
    "success": True,
    "data": {"id": "tx-1", "status": "pending", "hash": None, "value": "0x0", "to": "0x1"},
    "error": None,
}


@pytest.mark.parametrize(
    ("status", "body", "extra", "kind", "certain", "retry_after"),
    [
        (429, {"success": False, "error": "slow down", "after": 3}, "", "rate_limited", True, 3),
        (429, {"success": False}, "x-ratelimit-after: 2\r\n", "rate_limited", True, 2),
        (429, {"success": False, "after": "soon"}, "", "rate_limited", True, None),
        (400, {"success": False, "error": "bad to"}, "", "rejected", True, None),
        (422, {"success": False, "error": "bad value"}, "", "rejected", True, None),
        (401, {"success": False, "error": "Unauthorized"}, "", "refused", True, None),
        (403, {"success": False, "error": "paused"}, "", "refused", True, None),
        (404, {"success": False, "error": "no relayer"}, "", "not_found", True, None),
        (500, {"success": False, "error": "boom"}, "", "server_error", False, None),
        (503, {"success": False}, "", "server_error", False, None),
        (200, {"success": False, "error": "odd"}, "", "server_error", False, None),
    ],
)
async def test_answers_are_classified(
    serve: Callable[[Handler], Awaitable[str]],
    status: int,
    body: object,
    extra: str,
    kind: str,
    certain: bool,
    retry_after: float | None,
) -> None:
    error = await _submit_error(await serve(_answer(status, body, extra)))
    assert (error.kind, error.certain_not_created, error.retry_after_s) == (
        ErrorKind(kind),
        certain,
        retry_after,
    )
    assert error.status == status


async def test_a_refused_connection_certainly_created_nothing() -> None:
    error = await _submit_error(f"http://127.0.0.1:{_closed_port()}")
    assert (error.kind, error.certain_not_created) == (ErrorKind.connection, True)


async def test_no_answer_after_sending_is_in_doubt(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    error = await _submit_error(await serve(_hang), timeout_s=0.3)
    assert (error.kind, error.certain_not_created) == (ErrorKind.timeout, False)


async def test_a_connection_dropped_after_sending_is_in_doubt(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    error = await _submit_error(await serve(_drop))
    assert (error.kind, error.certain_not_created) == (ErrorKind.connection, False)


async def test_waiting_for_a_pooled_connection_that_never_frees_is_certain(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    url = await serve(_hang)
    client = ExecutorClient(url, "key", "relayer-1", timeout_s=0.4, max_connections=1)
    try:
        # Occupy the only connection with a request that outlives the test.
        busy = asyncio.create_task(client._http.request("GET", "/", timeout_s=30))
        await asyncio.sleep(0.2)
        with pytest.raises(ExecutorError) as caught:
            await client.submit(PAYLOAD)
        assert (caught.value.kind, caught.value.certain_not_created) == (ErrorKind.timeout, True)
        busy.cancel()
    finally:
        await client.aclose()


async def test_a_success_is_parsed_and_the_connection_reused(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    connections = 0
    answer = _answer(200, ENVELOPE_OK)

    async def counting(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await answer(reader, writer)

    client = ExecutorClient(await serve(counting), "key", "relayer-1")
    try:
        for _ in range(3):
            created = await client.submit(PAYLOAD)
            assert (created.id, created.status, created.value) == ("tx-1", "pending", 0)
    finally:
        await client.aclose()
    assert connections == 1


TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _capture(seen: list[dict[str, str]]) -> Handler:
    raw = json.dumps(ENVELOPE_OK).encode()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await _read_request(reader)).split(b"\r\n\r\n", 1)[0].decode()
        headers = dict(line.split(": ", 1) for line in head.split("\r\n")[1:] if ": " in line)
        seen.append({k.lower(): v for k, v in headers.items()})
        writer.write(
            f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(raw)}\r\nConnection: close\r\n\r\n".encode()
            + raw
        )
        await writer.drain()
        writer.close()

    return handle


async def test_the_executor_is_told_the_request_id_and_trace_and_the_call_is_timed(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    seen: list[dict[str, str]] = []
    client = ExecutorClient(await serve(_capture(seen)), "key", "relayer-1")
    counted = EXECUTOR_SECONDS.child("submit", "ok")
    before = counted._sum.get(), sum(b.get() for b in counted._buckets)
    try:
        await client.submit(PAYLOAD)  # outside any trace: no trace headers
        trace = tracing.begin("req-9", TRACEPARENT)
        token = tracing.activate(trace)
        try:
            await client.submit(PAYLOAD)
        finally:
            tracing.deactivate(token)
    finally:
        await client.aclose()
    assert "x-request-id" not in seen[0]
    assert "traceparent" not in seen[0]
    assert seen[1]["x-request-id"] == "req-9"
    assert seen[1]["traceparent"] == trace.traceparent
    assert sum(b.get() for b in counted._buckets) - before[1] == 2
    assert counted._sum.get() > before[0]


@pytest.mark.parametrize(
    ("status", "answer", "kind"),
    [
        (200, {"paused": True, "system_disabled": False}, ErrorKind.refused),
        (200, {"paused": False, "system_disabled": True}, ErrorKind.refused),
        (429, None, ErrorKind.rate_limited),
        (503, None, ErrorKind.server_error),
    ],
)
async def test_the_probe_fails_when_the_relayer_could_not_send(
    serve: Callable[[Handler], Awaitable[str]],
    status: int,
    answer: dict[str, bool] | None,
    kind: ErrorKind,
) -> None:
    body = {"success": status == 200, "data": answer, "error": None if answer else "no"}
    client = ExecutorClient(await serve(_answer(status, body)), "key", "relayer-1")
    try:
        with pytest.raises(ExecutorError) as caught:
            await client.probe()
        assert caught.value.kind is kind
    finally:
        await client.aclose()


async def test_the_probe_reads_the_relayers_status(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    seen: list[bytes] = []
    body = {"success": True, "data": {"paused": False, "balance": "10"}, "error": None}
    answer = _answer(200, body)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        seen.append(head.split(b"\r\n", 1)[0])
        reader.feed_data(head)
        await answer(reader, writer)

    client = ExecutorClient(await serve(handle), "key", "relayer/1")
    try:
        assert (await client.probe())["balance"] == "10"
    finally:
        await client.aclose()
    assert seen == [b"GET /api/v1/relayers/relayer%2F1/status HTTP/1.1"]
