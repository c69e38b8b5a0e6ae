"""The fault rig: the whole system as real processes on 127.0.0.1 (MariaDB, Redis, an SQS
server, the relayer-stub, consumer processes and, where a scenario needs it, the API), a TCP
proxy that can cut a service off, traffic at a steady rate, and the four counts every scenario
is judged by, taken from the executor's ledger and the database."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from consumer_testkit import process_env, rows, send_messages, sync_engine
from sqlalchemy import text, update

from relay_core.db.models import Transaction, utcnow
from relay_core.localsqs import free_port
from relay_testkit import Stub, new_api_key, stop_processes, wait_http

DEAD = "0x000000000000000000000000000000000000dEaD"
FINAL_OK = "confirmed"

# Fast, but with the production shape: every bound of the exactly-once argument kept.
CONSUMER_SETTINGS: dict[str, Any] = {
    "queue_visibility_timeout_s": 10,
    "executor_timeout_s": 2.0,
    "executor_handler_timeout_s": 2.0,
    "consumer_submit_budget_s": 3.0,
    "consumer_message_timeout_s": 30.0,
    "consumer_wait_time_s": 1,
    "consumer_backoff_base_s": 1.0,
    "consumer_backoff_cap_s": 5.0,
    "consumer_grace_s": 10,
    "consumer_concurrency": 128,
    "database_pool_size": 10,
    "database_connect_timeout_s": 1.0,
    "database_pool_timeout_s": 5.0,
    "consumer_reaper_interval_s": 2.0,
    "consumer_stale_claim_s": 30.0,
    "consumer_reconcile_interval_s": 2.0,
    "reconcile_pending_after_s": 30.0,
    "circuit_cooldown_s": 1.0,
    "circuit_cooldown_cap_s": 5.0,
    "tracker_interval_s": 0.5,
    "tracker_stale_s": 1.0,
    "log_level": "INFO",
}


@dataclass
class Counts:
    """What every scenario must show: nothing lost, nothing run twice, nothing stuck and
    nothing failed for a cause that was only temporary."""

    scenario: str
    transactions: int
    lost: int = 0
    executed_twice: int = 0
    stuck: int = 0
    failed_transient: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.lost or self.executed_twice or self.stuck or self.failed_transient)

    def line(self) -> str:
        return (
            f"{self.scenario}: {self.transactions} transactions, lost={self.lost} "
            f"executed_twice={self.executed_twice} stuck={self.stuck} "
            f"failed_transient={self.failed_transient} ({self.seconds:.0f} s)"
            + (f" [{'; '.join(self.notes)}]" if self.notes else "")
        )


RESULTS: list[Counts] = []  # every scenario's counts, printed together at the end of the run


@dataclass
class Rig:
    database_url: str
    infra: dict[str, Any]
    stub: Stub
    queues: tuple[str, str]
    processes: Processes
    workdir: Path

    def record(self, counts: Counts) -> None:
        RESULTS.append(counts)
        print(counts.line())  # noqa: T201


def tally(scenario: str, database_url: str, stub: Stub, expected: Iterable[str]) -> Counts:
    """Judge ``expected`` (every transaction a client was told was accepted) from the ledger
    and the database. Executions are matched by calldata, which is unique per transaction."""
    by_id = {row["id"]: row for row in rows(database_url)}
    _, entries = stub.ledger()
    executions = Counter(str(entry["data"]).lower() for entry in entries)
    expected = list(expected)
    counts = Counts(scenario, len(expected))
    for tx_id in expected:
        row = by_id.get(tx_id)
        if row is None:
            counts.lost += 1
            continue
        runs = executions.get(str(row["request"].get("data", "")).lower(), 0)
        if runs == 0:
            counts.lost += 1
        elif runs > 1:
            counts.executed_twice += 1
        if row["status"] in ("failed", "expired", "canceled"):
            counts.failed_transient += 1
            counts.notes.append(f"{tx_id} {row['status']}: {row['error']}"[:160])
        elif row["status"] != FINAL_OK:
            counts.stuck += 1
    # Rows nobody was told about (the API died before answering) must not run twice either.
    for row in by_id.values():
        if row["id"] not in set(expected):
            data = str(row["request"].get("data", "")).lower()
            counts.executed_twice += executions.get(data, 0) > 1
    counts.notes = counts.notes[:5]
    return counts


async def settle(database_url: str, ids: list[str], timeout_s: float) -> None:
    """Wait until every one of ``ids`` is final (or the time is up: the tally says what not)."""
    wanted = set(ids)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        engine = sync_engine(database_url)
        with engine.connect() as conn:
            open_ids = {
                r[0]
                for r in conn.execute(
                    text(
                        "SELECT id FROM transactions WHERE status NOT IN "
                        "('confirmed','failed','expired','canceled')"
                    )
                )
            }
            present = conn.execute(text("SELECT COUNT(*) FROM transactions")).scalar_one()
        engine.dispose()
        if not (open_ids & wanted) and present >= len(wanted):
            return
        await asyncio.sleep(1.0)


# --- traffic ----------------------------------------------------------------------------------


async def feed(sqs: Any, queue_url: str, database_url: str, ids: list[str], rate: float) -> None:
    """Send the messages of ``ids`` at ``rate`` per second (batches of 10) and mark the rows
    enqueued, as the API's publisher does while clients keep coming."""
    interval = 10 / rate
    started = time.monotonic()
    engine = sync_engine(database_url)
    try:
        for n, start in enumerate(range(0, len(ids), 10)):
            batch = ids[start : start + 10]
            await send_messages(sqs, queue_url, batch)
            with engine.begin() as conn:
                conn.execute(
                    update(Transaction)
                    .where(Transaction.id.in_(batch))
                    .values(enqueued_at=utcnow())
                )
            await asyncio.sleep(max(0.0, started + (n + 1) * interval - time.monotonic()))
    finally:
        engine.dispose()


async def post_direct(
    api_url: str, key: str, count: int, rate: float, *, give_up_after_s: float = 120
) -> tuple[list[str], int]:
    """POST ``count`` direct transactions at ``rate`` per second, as a careful client: each
    with its own Idempotency-Key, retried with it while the API does not answer (or answers
    503). Returns the transaction ids answered 202, and how many requests went unanswered."""
    accepted: list[str] = []
    unanswered = 0
    prefix = uuid.uuid4().hex[:8]
    # No pool limit: connections cut off by a killed server are not always given back to
    # httpx's pool, and a bounded pool then starves every later request (PoolTimeout).
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=api_url, timeout=5, limits=limits) as http:
        started = time.monotonic()

        async def one(i: int) -> None:
            nonlocal unanswered
            await asyncio.sleep(max(0.0, started + i / rate - time.monotonic()))
            body = {"to": DEAD, "data": f"0x{prefix}{i:08x}"}
            headers = {"X-API-Key": key, "Idempotency-Key": f"{prefix}-{i}"}
            deadline = time.monotonic() + give_up_after_s
            last = ""
            while time.monotonic() < deadline:
                try:
                    response = await http.post("/api/v1/relay/direct", json=body, headers=headers)
                except httpx.HTTPError as exc:
                    unanswered += 1
                    last = repr(exc)
                    await asyncio.sleep(0.5)
                    continue
                if response.status_code == 202:
                    accepted.append(response.json()["transactionId"])
                    return
                if response.status_code != 503:
                    raise AssertionError(response.text)
                last = response.text
                await asyncio.sleep(0.5)
            raise AssertionError(f"request {i} never answered 202; last: {last}")

        await asyncio.gather(*(one(i) for i in range(count)))
    return accepted, unanswered


# --- a TCP proxy that can cut a service off ------------------------------------------------------


class TcpProxy:
    """Forwards 127.0.0.1:port to a target. ``cut`` resets every open connection and refuses
    new ones (the service unreachable); ``restore`` listens again on the same port."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.port = free_port()
        self._target = (target_host, target_port)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._transports: set[asyncio.BaseTransport] = set()

    def __enter__(self) -> TcpProxy:
        self._thread.start()
        self._run(self._listen())
        return self

    def __exit__(self, *exc: object) -> None:
        self._run(self._close(abort=True))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def cut(self) -> None:
        self._run(self._close(abort=True))

    def restore(self) -> None:
        self._run(self._listen())

    def _run(self, coroutine: Awaitable[None]) -> None:
        asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(10)  # type: ignore[arg-type]

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def _close(self, *, abort: bool) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        if abort:
            for transport in list(self._transports):
                transport.abort()  # type: ignore[attr-defined]
            self._transports.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.transport.abort()
            return
        pair = (writer.transport, up_writer.transport)
        self._transports.update(pair)
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            for transport in pair:
                self._transports.discard(transport)
                transport.abort()  # type: ignore[attr-defined]


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(OSError, RuntimeError):
        writer.write_eof()


# --- processes -----------------------------------------------------------------------------------


@dataclass
class Processes:
    """The consumer (and API) processes of one scenario; all stopped at the end."""

    workdir: Path
    env: dict[str, Any]
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def consumer(self, name: str, **overrides: Any) -> subprocess.Popen[bytes]:
        env = process_env(
            {
                **self.env,
                **CONSUMER_SETTINGS,
                "consumer_id": name,
                "consumer_heartbeat_file": str(self.workdir / f"{name}.heartbeat"),
                **overrides,
            }
        )
        return self._spawn(name, [sys.executable, "-m", "queue_consumer.main"], env)

    def api(self, name: str, port: int, **overrides: str) -> subprocess.Popen[bytes]:
        env = process_env({**self.env, **overrides})
        env.update(
            PORT=str(port), RELAY_OUTBOX_SWEEP_GRACE_S="3", RELAY_OUTBOX_SWEEP_INTERVAL_S="1"
        )
        process = self._spawn(name, [sys.executable, "-m", "relay_api.cli", "serve"], env)
        wait_http(f"http://127.0.0.1:{port}/health", process, 60)
        return process

    def api_key(self) -> str:
        """A client whose rate limit the scenarios' traffic stays under."""
        return new_api_key(process_env(self.env), "faults", rate_per_s=1000, burst=2000)

    def _spawn(self, name: str, command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115
        process = subprocess.Popen(command, env=env, stdout=log, stderr=log)
        self.started.append(process)
        return process

    def stop_all(self) -> None:
        stop_processes(self.started, timeout_s=20)
