"""The benchmark's load generator measures a request from the moment it starts it, waits for a
connection included, and reports its own timer's lateness apart (bench/loadgen.py)."""

from __future__ import annotations

import asyncio

import pytest

from bench.loadgen import Generator, Recorder


def test_latency_runs_from_the_start_and_the_due_time_and_lateness_are_kept_beside() -> None:
    recorder = Recorder(expect_status={200}, expect_header={})
    recorder.record(due=10.000, started=10.002, sent=10.003, done=10.004, status=200, headers={})
    assert recorder.latencies_ms == [pytest.approx(2.0)]
    assert recorder.from_due_ms == [pytest.approx(4.0)]
    assert recorder.late_ms == [pytest.approx(2.0)]
    assert recorder.ok == 1


async def _slow_server(delay_s: float) -> tuple[asyncio.Server, int]:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                await asyncio.sleep(delay_s)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_a_request_waiting_for_a_busy_connection_counts_the_wait() -> None:
    # One connection, answers taking 10 ms, offered every 2 ms: the requests queue behind
    # one another, and that queue is the server's slowness, so it must be in the latency.
    server, port = await _slow_server(0.010)
    async with server:
        spec = {"port": port, "path": "/", "rate": 500, "count": 20, "connections": 1}
        result = await Generator(spec).run()
    assert result["error_count"] == 0
    assert result["completed"] == 20
    # the last request waits for the nineteen before it: ~19 times 10 ms less its 38 ms head start
    assert result["latency_ms"]["max"] >= 100
    assert result["latency_ms"]["p50"] >= 40
    assert result["generator_late_ms"]["p99"] < 50  # the generator itself kept time
