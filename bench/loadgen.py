"""A load generator for one HTTP/1.1 server on loopback, run as its own process.

``python -m bench.loadgen SPEC.json`` prints one JSON result on stdout. The client is a few
lines of asyncio over keep-alive connections (no HTTP library): on a 2-core machine every
microsecond the generator spends is taken from the server it measures.

Open loop (``rate``): request *i* is due at ``start + i / rate`` whatever happened to the
earlier ones, and is started when the generator's timer wakes for it, whether or not the
earlier ones were answered. Its latency (``latency_ms``) is measured from that start: the wait
for a free connection, the request on the wire and the answer, so a server that falls behind
shows it in the percentiles (no coordinated omission). The event loop's timers have a
resolution of a millisecond, so a request starts up to a millisecond or so before or after
its due time (more when the generator is descheduled; docs/performance.md has the figures):
that error of the generator's is not the server's latency, and it is reported on its own
(``generator_late_ms``: start minus due time), beside the latency measured from the due time
(``latency_from_due_ms``, the measure before issue 18's third stop).
Closed loop (``concurrency``): that many requests in flight back to back, for the highest rate
the server can answer.

Spec fields: ``port``, ``method``, ``paths`` (cycled) or ``path``, ``headers``, ``body`` (JSON
text), ``rate`` or ``concurrency``, ``duration_s``, ``count`` (instead of a duration),
``warmup_s`` (sent, not recorded), ``connections`` (most open at once), ``timeout_s``,
``expect_status``, ``expect_header`` ({name: value}: anything else is an error).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class ProtocolError(Exception):
    pass


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.used = 0

    async def request(self, raw: bytes) -> tuple[int, dict[str, str], bytes]:
        self.used += 1
        self.writer.write(raw)
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
            raise ProtocolError(f"bad status line {lines[0]!r}")
        headers = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).strip(), 16)
                chunk = await self.reader.readexactly(size + 2)
                if size == 0:
                    break
                body += chunk[:-2]
        else:
            body = await self.reader.readexactly(int(headers.get("content-length", "0")))
        return int(parts[1]), headers, body

    @property
    def reusable(self) -> bool:
        return not self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()


class Pool:
    def __init__(self, port: int, most: int) -> None:
        self.port = port
        self.most = most
        self.opened = 0
        self.idle: list[Connection] = []
        self.slots = asyncio.Semaphore(most)

    async def acquire(self) -> Connection:
        await self.slots.acquire()
        if self.idle:
            return self.idle.pop()
        try:
            return await self.open()
        except BaseException:
            self.slots.release()
            raise

    async def open(self) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.opened += 1
        return Connection(reader, writer)

    def release(self, connection: Connection, healthy: bool) -> None:
        if healthy and connection.reusable:
            self.idle.append(connection)
        else:
            connection.close()
        self.slots.release()

    def close(self) -> None:
        for connection in self.idle:
            connection.close()


@dataclass
class Recorder:
    expect_status: set[int]
    expect_header: dict[str, str]
    latencies_ms: list[float] = field(default_factory=list)  # from the start
    from_due_ms: list[float] = field(default_factory=list)
    late_ms: list[float] = field(default_factory=list)  # start minus due time
    # latencies by the second (since the first due request) their request was due in
    by_second: dict[int, list[float]] = field(default_factory=dict)
    # the generator's own share: by the second, the most a request was sent after its due
    # time (this process descheduled, or waiting for a connection)
    late_send_ms: dict[int, float] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    header_values: Counter[str] = field(default_factory=Counter)
    ok: int = 0
    first_due: float | None = None
    last_done: float = 0.0

    def record(
        self,
        due: float,
        started: float,
        sent: float,
        done: float,
        status: int,
        headers: dict[str, str],
    ) -> None:
        latency_ms = (done - started) * 1000
        self.latencies_ms.append(latency_ms)
        self.from_due_ms.append((done - due) * 1000)
        self.late_ms.append((started - due) * 1000)
        second = int(due - (self.first_due or due))
        self.by_second.setdefault(second, []).append(latency_ms)
        self.late_send_ms[second] = max(self.late_send_ms.get(second, 0.0), (sent - due) * 1000)
        self.last_done = max(self.last_done, done)
        problem = None
        if status not in self.expect_status:
            problem = f"status_{status}"
        for name, wanted in self.expect_header.items():
            got = headers.get(name, "-")
            self.header_values[f"{name}={got}"] += 1
            if got != wanted and problem is None:
                problem = f"{name}_{got}"
        if problem is None:
            self.ok += 1
        else:
            self.errors[problem] += 1


def percentile(sorted_values: list[float], fraction: float) -> float | None:
    if not sorted_values:
        return None
    index = min(len(sorted_values) - 1, max(0, round(fraction * len(sorted_values) + 0.5) - 1))
    return sorted_values[index]


def latency_summary(values: list[float]) -> dict[str, float | None]:
    ordered = sorted(values)

    def r(value: float | None) -> float | None:
        return None if value is None else round(value, 3)

    return {
        "p50": r(percentile(ordered, 0.50)),
        "p95": r(percentile(ordered, 0.95)),
        "p99": r(percentile(ordered, 0.99)),
        "max": r(ordered[-1] if ordered else None),
        "mean": r(sum(ordered) / len(ordered) if ordered else None),
    }


class Generator:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.port = int(spec["port"])
        self.paths: list[str] = spec.get("paths") or [spec["path"]]
        method = spec.get("method", "GET")
        body = spec.get("body")
        payload = body.encode() if isinstance(body, str) else b""
        header_lines = "".join(f"{k}: {v}\r\n" for k, v in (spec.get("headers") or {}).items())
        if payload:
            header_lines += f"Content-Length: {len(payload)}\r\n"
        host = f"Host: 127.0.0.1:{self.port}\r\n"
        self.raw = [
            f"{method} {path} HTTP/1.1\r\n{host}{header_lines}\r\n".encode() + payload
            for path in self.paths
        ]
        self.timeout_s = float(spec.get("timeout_s", 5.0))
        self.pool = Pool(self.port, int(spec.get("connections", 64)))
        self.recorder = Recorder(
            expect_status=set(spec.get("expect_status") or [200]),
            expect_header={k.lower(): v for k, v in (spec.get("expect_header") or {}).items()},
        )
        self.tasks: set[asyncio.Task[None]] = set()
        self.stale_retries = 0

    async def one(self, index: int, due: float, record: bool) -> None:
        started = time.perf_counter()
        raw = self.raw[index % len(self.raw)]
        connection = None
        healthy = False
        try:
            async with asyncio.timeout(self.timeout_s):
                connection = await self.pool.acquire()
                sent = time.perf_counter()
                try:
                    status, headers, _ = await connection.request(raw)
                except (asyncio.IncompleteReadError, ConnectionError) as exc:
                    # A kept-alive connection the server closed while idle (uvicorn closes
                    # them after 5 s): nothing was answered, so send again on a new one, as
                    # HTTP clients do. Anything else is an error.
                    partial = getattr(exc, "partial", b"")
                    if connection.used <= 1 or partial:
                        raise
                    connection.close()
                    self.stale_retries += 1
                    connection = await self.pool.open()
                    status, headers, _ = await connection.request(raw)
            healthy = headers.get("connection", "").lower() != "close"
            if record:
                self.recorder.record(due, started, sent, time.perf_counter(), status, headers)
        except TimeoutError:
            if record:
                self.recorder.errors["timeout"] += 1
        except (OSError, asyncio.IncompleteReadError, ProtocolError, ValueError) as exc:
            if record:
                self.recorder.errors[type(exc).__name__] += 1
        finally:
            if connection is not None:
                self.pool.release(connection, healthy)

    def spawn(self, index: int, due: float, record: bool) -> None:
        task = asyncio.create_task(self.one(index, due, record))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def open_loop(self, rate: float, duration_s: float | None, count: int | None) -> float:
        warmup = int(float(self.spec.get("warmup_s", 0)) * rate)
        total = count if count is not None else round(rate * float(duration_s or 0))
        start = time.perf_counter() + 0.05
        for i in range(warmup + total):
            due = start + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            record = i >= warmup
            if record and self.recorder.first_due is None:
                self.recorder.first_due = due
            self.spawn(i, due, record)
        if self.tasks:
            await asyncio.wait(set(self.tasks))
        return total / rate

    async def closed_loop(self, concurrency: int, duration_s: float) -> float:
        warmup_s = float(self.spec.get("warmup_s", 0))
        begin = time.perf_counter()
        record_from = begin + warmup_s
        stop_at = record_from + duration_s
        counter = iter(range(10**9))

        async def worker() -> None:
            while (now := time.perf_counter()) < stop_at:
                record = now >= record_from
                if record and self.recorder.first_due is None:
                    self.recorder.first_due = now
                await self.one(next(counter), now, record)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return duration_s

    async def run(self) -> dict[str, Any]:
        usage_before = resource.getrusage(resource.RUSAGE_SELF)
        if "rate" in self.spec:
            nominal_s = await self.open_loop(
                float(self.spec["rate"]), self.spec.get("duration_s"), self.spec.get("count")
            )
        else:
            nominal_s = await self.closed_loop(
                int(self.spec["concurrency"]), float(self.spec["duration_s"])
            )
        self.pool.close()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        rec = self.recorder
        elapsed = max(rec.last_done - (rec.first_due or rec.last_done), 1e-9)
        completed = len(rec.latencies_ms)
        return {
            "mode": "open" if "rate" in self.spec else "closed",
            "offered_rate": self.spec.get("rate"),
            "concurrency": self.spec.get("concurrency"),
            "nominal_s": round(nominal_s, 3),
            "elapsed_s": round(elapsed, 3),
            "completed": completed,
            "ok": rec.ok,
            "errors": dict(rec.errors),
            "error_count": sum(rec.errors.values()),
            # OK answers over the time from the first due request to the last answer.
            "achieved_rate": round(rec.ok / elapsed, 1) if completed else 0.0,
            "latency_ms": latency_summary(rec.latencies_ms),
            "latency_from_due_ms": latency_summary(rec.from_due_ms),
            "generator_late_ms": latency_summary(rec.late_ms),
            # where a tail comes from: a few stalls, or steady queueing
            "timeline": [
                {
                    "second": second,
                    "requests": len(values),
                    **latency_summary(values),
                    "late_send_max": round(rec.late_send_ms.get(second, 0.0), 3),
                }
                for second, values in sorted(rec.by_second.items())
            ],
            "header_values": dict(rec.header_values),
            # the first due request on the wall clock, to line the timeline up with others
            "first_due_epoch": (
                round(time.time() - (time.perf_counter() - rec.first_due), 3)
                if rec.first_due is not None
                else None
            ),
            "connections_opened": self.pool.opened,
            "stale_connection_retries": self.stale_retries,
            "generator_cpu_s": round(
                usage.ru_utime + usage.ru_stime - usage_before.ru_utime - usage_before.ru_stime, 3
            ),
        }


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[1]).read_text() if len(argv) > 1 else sys.stdin.read())
    runner: Any = asyncio.run
    with contextlib.suppress(ImportError):
        import uvloop

        runner = uvloop.run
    result = runner(Generator(spec).run())
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
