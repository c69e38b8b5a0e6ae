"""Ceilings, measured in the same run on the same servers as the relay itself:

- SQS: raw ReceiveMessage(10) + DeleteMessageBatch with the consumer's number of pollers,
  aiobotocore and nothing else (same client config and receive arguments as the consumer);
- MariaDB: single-row INSERT + COMMIT of a transactions row at a given concurrency, asyncmy
  (the relay's driver) and nothing else;
- HTTP: a bare FastAPI endpoint on one uvicorn worker, served like ``relay serve``.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from typing import Any

import asyncmy
from sqlalchemy.engine import make_url

from bench import infra, seed
from bench.infra import Run, check
from bench.measure import Sampler


async def sqs_ceiling(run: Run, messages: int, pollers: int) -> dict[str, Any]:
    queue_name = f"bench-{run.run_id}-ceiling-p{pollers}"
    async with run.sqs_client(queue_name) as sqs:
        queue_url, _ = await run.create_queues(sqs, queue_name)
        await seed.send_messages(sqs, queue_url, [str(uuid.uuid4()) for _ in range(messages)])
        check(
            await seed.queue_remaining(sqs, queue_url) == messages,
            "SQS ceiling: preload did not land",
        )
    assert run.sqs is not None
    sampler = Sampler({"harness (aiobotocore)": os.getpid(), "sqs": run.sqs.process.pid})
    done = 0
    finished = asyncio.Event()
    async with run.sqs_client(queue_name) as sqs:
        last_take = 0.0
        sampler.take(0)

        async def poller() -> None:
            nonlocal done, last_take
            while not finished.is_set():
                response = await sqs.receive_message(
                    QueueUrl=queue_url,
                    MaxNumberOfMessages=10,
                    WaitTimeSeconds=1,
                    AttributeNames=["ApproximateReceiveCount"],
                    MessageAttributeNames=["All"],
                )
                batch = response.get("Messages", [])
                if not batch:
                    continue
                entries = [
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(batch)
                ]
                deleted = await sqs.delete_message_batch(QueueUrl=queue_url, Entries=entries)
                done += len(deleted.get("Successful", []))
                now = time.perf_counter()
                if now - last_take >= 0.1 or done >= messages:
                    last_take = now
                    sampler.take(done)
                if done >= messages:
                    finished.set()

        tasks = [asyncio.create_task(poller()) for _ in range(pollers)]
        try:
            await asyncio.wait_for(finished.wait(), timeout=max(60.0, messages / 20))
        except TimeoutError:
            sampler.take(done)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        await sqs.delete_queue(QueueUrl=queue_url)
    check(done >= messages, f"SQS ceiling: only {done} of {messages} messages received")
    window = sampler.window(messages)
    return {
        "pollers": pollers,
        "messages": messages,
        "rate": window["rate"],
        "window": window,
        "total_s": round(sampler.samples[-1].t - sampler.samples[0].t, 2),
    }


async def _connect(database_url: str) -> Any:
    """A raw asyncmy connection (the relay's driver, no SQLAlchemy), autocommit off."""
    url = make_url(database_url)
    return await asyncmy.connect(
        host=url.host or "127.0.0.1",
        port=url.port or 3306,
        user=url.username or "root",
        password=url.password or "",
        database=url.database,
        autocommit=False,
    )


_INSERT = (
    "INSERT INTO transactions (id, client_id, type, status, version, request, "
    "request_fingerprint, attempts, created_at, updated_at) "
    "VALUES (%s, %s, 'direct', 'pending', 1, %s, %s, 0, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))"
)


async def db_ceiling(database_url: str, concurrency: int, duration_s: float) -> dict[str, Any]:
    """Single-row INSERT + COMMIT of a transactions row, ``concurrency`` connections."""
    client_id = seed.create_client(database_url, name="ceiling")
    connections = [await _connect(database_url) for _ in range(concurrency)]
    request = json.dumps({"to": infra.DEAD, "data": "0x", "value": "0", "speed": "fast"})
    count = 0
    latencies: list[float] = []
    stop_at = time.perf_counter() + duration_s

    async def worker(connection: Any) -> None:
        nonlocal count
        async with connection.cursor() as cursor:
            while (started := time.perf_counter()) < stop_at:
                await cursor.execute(
                    _INSERT, (str(uuid.uuid4()), client_id, request, uuid.uuid4().hex)
                )
                await connection.commit()
                latencies.append(time.perf_counter() - started)
                count += 1

    began = time.perf_counter()
    try:
        await asyncio.gather(*(worker(c) for c in connections))
    finally:
        for connection in connections:
            connection.close()
    elapsed = time.perf_counter() - began
    latencies.sort()
    return {
        "concurrency": concurrency,
        "rate": round(count / elapsed, 1),
        "inserts": count,
        "p50_ms": round(latencies[len(latencies) // 2] * 1000, 3) if latencies else None,
    }


async def db_latency_ceiling(
    database_url: str, rate: int, duration_s: float, connections: int = 10
) -> dict[str, Any]:
    """INSERT + COMMIT of a transactions row at a steady ``rate`` (open loop, latency from
    each insert's due time) over ``connections`` connections, asyncmy and nothing else: what
    the accept path's database part alone achieves at that rate, the floor under its p99."""
    from bench.loadgen import latency_summary

    client_id = seed.create_client(database_url, name="ceiling-latency")
    idle: asyncio.Queue[Any] = asyncio.Queue()
    for _ in range(connections):
        idle.put_nowait(await _connect(database_url))
    request = json.dumps({"to": infra.DEAD, "data": "0x", "value": "0", "speed": "fast"})
    latencies_ms: list[float] = []
    stalls: list[dict[str, float]] = []

    async def insert(due: float) -> None:
        connection = await idle.get()
        try:
            async with connection.cursor() as cursor:
                await cursor.execute(
                    _INSERT, (str(uuid.uuid4()), client_id, request, uuid.uuid4().hex)
                )
            await connection.commit()
        finally:
            idle.put_nowait(connection)
        latency = (time.perf_counter() - due) * 1000
        latencies_ms.append(latency)
        if latency > 50:
            stalls.append({"at_s": round(due - start, 2), "ms": round(latency, 1)})

    count = int(rate * duration_s)
    start = time.perf_counter() + 0.05
    tasks = []
    for i in range(count):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(insert(due)))
    await asyncio.gather(*tasks)
    while not idle.empty():
        idle.get_nowait().close()
    return {
        "rate": rate,
        "connections": connections,
        "inserts": count,
        "latency_ms": latency_summary(latencies_ms),
        "stalls_over_50ms": stalls[:50],
    }


class CommitProbe:
    """INSERT + COMMIT into a table of its own every ``interval_s`` on one connection, beside
    a scenario on the same server: when the scenario's latency has a tail, this shows whether
    the database's commits stalled in the same seconds (the machine's disk does, now and then,
    for tens to hundreds of milliseconds)."""

    def __init__(self, database_url: str, interval_s: float = 0.02) -> None:
        self._database_url = database_url
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None
        self._started = 0.0
        self.started_epoch = 0.0
        self.samples: list[tuple[float, float]] = []  # (seconds since start, latency ms)

    async def start(self) -> None:
        connection = await _connect(self._database_url)
        async with connection.cursor() as cursor:
            await cursor.execute("SET SESSION sql_notes = 0")  # no "already exists" note
            await cursor.execute(
                "CREATE TABLE IF NOT EXISTS bench_commit_probe "
                "(id BIGINT AUTO_INCREMENT PRIMARY KEY, at DATETIME(6))"
            )
        self._started = time.perf_counter()
        self.started_epoch = time.time()
        self._task = asyncio.create_task(self._run(connection))

    async def _run(self, connection: Any) -> None:
        try:
            async with connection.cursor() as cursor:
                while True:
                    began = time.perf_counter()
                    await cursor.execute(
                        "INSERT INTO bench_commit_probe (at) VALUES (UTC_TIMESTAMP(6))"
                    )
                    await connection.commit()
                    done = time.perf_counter()
                    self.samples.append((began - self._started, (done - began) * 1000))
                    await asyncio.sleep(max(0.0, self._interval_s - (done - began)))
        finally:
            connection.close()

    async def stop(self, align_epoch: float | None = None) -> dict[str, Any]:
        """``align_epoch``: count seconds from this wall-clock time (another timeline's
        start) instead of the probe's own start."""
        from bench.loadgen import latency_summary

        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        offset = self.started_epoch - align_epoch if align_epoch else 0.0
        by_second: dict[int, list[float]] = {}
        for at, ms in self.samples:
            if at + offset >= 0:
                by_second.setdefault(int(at + offset), []).append(ms)
        return {
            "commits": len(self.samples),
            "latency_ms": latency_summary([ms for _, ms in self.samples]),
            "slow_seconds": {
                second: round(max(values), 1)
                for second, values in sorted(by_second.items())
                if max(values) > 50
            },
        }


def start_bare_server(run: Run) -> tuple[Any, int]:
    return run.spawn_server("bare-server", "bare")


async def http_ceiling(
    run: Run,
    duration_s: float,
    concurrency: int,
    latency_rate: int,
    latency_s: float,
    server: tuple[Any, int] | None = None,
) -> dict[str, Any]:
    """The bare endpoint: highest closed-loop rate, then latency at ``latency_rate``."""
    process, port = server or start_bare_server(run)
    try:
        await run.wait_http(f"http://127.0.0.1:{port}/docs", process)
        base = {
            "port": port,
            "method": "POST",
            "path": "/bare",
            "headers": {"Content-Type": "application/json"},
            "body": json.dumps({"to": infra.DEAD, "data": "0x", "value": "0", "speed": "fast"}),
            "expect_status": [202],
            "connections": 64,
        }
        cpu_before = _cpu(process.pid)
        closed = await infra.run_loadgen(
            run,
            {**base, "concurrency": concurrency, "duration_s": duration_s},
            "bare-closed",
        )
        cpu_used = _cpu(process.pid) - cpu_before
        check(closed["ok"] > 0, f"bare endpoint answered nothing: {closed['errors']}")
        check(closed["error_count"] == 0, f"bare endpoint errors: {closed['errors']}")
        opened = await infra.run_loadgen(
            run, {**base, "rate": latency_rate, "duration_s": latency_s}, "bare-open"
        )
        check(opened["error_count"] == 0, f"bare endpoint errors: {opened['errors']}")
        return {
            "rate": closed["achieved_rate"],
            "concurrency": concurrency,
            "server_cpu_us_per_request": round(1e6 * cpu_used / max(closed["completed"], 1), 1),
            "closed_loop": closed,
            "latency_at_rate": opened,
        }
    finally:
        await run.stop_async(process)


def _cpu(pid: int) -> float:
    from bench import procstat

    return procstat.cpu_seconds(pid) or 0.0
