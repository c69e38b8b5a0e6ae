"""The fault rig: the whole system as real processes on 127.0.0.1 (MariaDB, Redis, an SQS
server, the relayer-stub, consumer processes and, where a scenario needs it, the API), a TCP
proxy that can cut a service off, traffic at a steady rate on the lanes a traffic shape asks
for, and what every scenario is judged by, taken from the executor's ledger and the database:
the four counts and the recovery time.

The processes run the settings a user gets (`make run`, infra/): nothing here shortens a
timing. A scenario overrides only what makes its fault."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from consumer_testkit import process_env, rows, seed_rows, set_rows, sync_engine
from sqlalchemy import text, update

from relay_core.db.models import Transaction, utcnow
from relay_core.queue import TransactionMessage, pack, send_batch, send_packed
from relay_core.statuses import TxType
from relay_core.tracing import Trace
from relay_testkit import Stub, new_api_key, stop_processes, unfinished, wait_http

DEAD = "0x000000000000000000000000000000000000dEaD"
FINAL_OK = "confirmed"

# The traffic shapes: everything on the fast lane (speed fast or fastest, as clients who follow
# the OZ Relayer's default send), everything on the normal lane, and both.
SHAPES = ("fast", "normal", "mixed")
SPEEDS = {"fast": ("fast", "fastest"), "normal": ("average", "safeLow")}


def lane_of(shape: str, index: int) -> str:
    return shape if shape != "mixed" else ("fast", "normal")[index % 2]


def speed_of(shape: str, index: int) -> str:
    return SPEEDS[lane_of(shape, index)][index // 2 % 2]


# The executor walks every transaction to `confirmed` quickly; the consumers' tracker follows.
STUB_LIFECYCLE = {
    "paused": False,
    "delay_sent_ms": 50,
    "delay_submitted_ms": 50,
    "delay_mined_ms": 50,
    "delay_confirmed_ms": 50,
}

RECOVERY_GRACE_S = 60.0  # past the fault's end, on top of the backlog's drain time


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
    # From the end of the fault: the first and the last transaction decided (handed to the
    # executor, or ended) after it; how many were waiting then; the best rate of decisions the
    # scenario showed (per second, over 5 s), which the backlog is allowed to drain at.
    moving_after_s: float | None = None
    recovery_s: float = 0.0
    backlog: int = 0
    throughput_per_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def bound_s(self) -> float:
        drain = self.backlog / self.throughput_per_s if self.throughput_per_s else 0.0
        return RECOVERY_GRACE_S + drain

    @property
    def recovered(self) -> bool:
        return self.recovery_s <= self.bound_s

    @property
    def clean(self) -> bool:
        counts = self.lost or self.executed_twice or self.stuck or self.failed_transient
        return not counts and self.recovered

    def line(self) -> str:
        moving = "-" if self.moving_after_s is None else f"{self.moving_after_s:.1f} s"
        return (
            f"{self.scenario}: {self.transactions} transactions, lost={self.lost} "
            f"executed_twice={self.executed_twice} stuck={self.stuck} "
            f"failed_transient={self.failed_transient}; recovery {self.recovery_s:.1f} s "
            f"(bound {self.bound_s:.0f} s: backlog {self.backlog} at "
            f"{self.throughput_per_s:.0f}/s; moving after {moving}) ({self.seconds:.0f} s)"
            + (f" [{'; '.join(self.notes)}]" if self.notes else "")
        )


@dataclass
class Rig:
    database_url: str
    infra: dict[str, Any]
    stub: Stub
    lanes: dict[str, tuple[str, str]]  # each lane's (queue URL, DLQ URL)
    processes: Processes
    workdir: Path
    # Where a scenario's verdict goes: its test's user properties, which reach the process
    # that prints the summary (also under pytest-xdist).
    properties: list[tuple[str, object]] = field(default_factory=list)

    def record(self, counts: Counts) -> None:
        self.properties.append(("fault", {"line": counts.line(), "clean": counts.clean}))
        print(counts.line())  # noqa: T201


def tally(
    scenario: str,
    database_url: str,
    stub: Stub,
    expected: Iterable[str],
    fault_ended: datetime,
) -> Counts:
    """Judge ``expected`` (every transaction a client was told was accepted) from the ledger
    and the database. Executions are matched by calldata, which is unique per transaction.
    ``fault_ended``: when the fault was over (UTC, as the database's clock)."""
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
    _recovery(counts, [by_id[i] for i in expected if i in by_id], fault_ended)
    return counts


def _decided(row: dict[str, Any]) -> datetime | None:
    """When the consumer was done deciding a transaction: it reached the executor, or ended."""
    if row["submitted_at"] is not None:
        return row["submitted_at"]  # type: ignore[no-any-return]
    if row["status"] in ("confirmed", "failed", "expired", "canceled"):
        return row["updated_at"]  # type: ignore[no-any-return]
    return None


def _recovery(counts: Counts, decided_rows: list[dict[str, Any]], ended: datetime) -> None:
    times = sorted(t for t in map(_decided, decided_rows) if t is not None)
    after = [t for t in times if t > ended]
    waiting = [
        row
        for row in decided_rows
        if row["created_at"] <= ended and ((_decided(row) or ended) > ended)
    ]
    counts.backlog = len(waiting)
    counts.recovery_s = max(0.0, ((after[-1] if after else ended) - ended).total_seconds())
    counts.moving_after_s = (after[0] - ended).total_seconds() if after else None
    best, start = 0, 0
    for end, moment in enumerate(times):  # the most decisions in any 5 s
        while (moment - times[start]).total_seconds() > 5:
            start += 1
        best = max(best, end - start + 1)
    counts.throughput_per_s = best / 5


async def settle(database_url: str, ids: list[str], timeout_s: float) -> None:
    """Wait until every one of ``ids`` is final (or the time is up: the tally says what not)."""
    wanted = set(ids)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        open_ids = unfinished(database_url)
        engine = sync_engine(database_url)
        with engine.connect() as conn:
            present = conn.execute(text("SELECT COUNT(*) FROM transactions")).scalar_one()
        engine.dispose()
        if not (open_ids & wanted) and present >= len(wanted):
            return
        await asyncio.sleep(1.0)


# --- traffic ----------------------------------------------------------------------------------


def seed(database_url: str, count: int, shape: str, *, first: int = 0) -> list[str]:
    """``count`` committed rows, each on the lane and with the speed ``shape`` gives its index,
    and distinct calldata (numbered from ``first``); enqueued (their messages are sent by the
    caller)."""
    ids = seed_rows(
        database_url,
        count,
        request=lambda i: {
            "to": DEAD,
            "data": f"0x{first + i:08x}",
            "value": "0",
            "speed": speed_of(shape, i),
        },
    )
    fast = [tx_id for i, tx_id in enumerate(ids) if lane_of(shape, i) == "fast"]
    if fast:
        set_rows(database_url, fast, lane="fast")
    return ids


def lanes_of(database_url: str) -> dict[str, str]:
    return {row["id"]: row["lane"] for row in rows(database_url)}


async def send_to_lanes(
    sqs: Any,
    lanes: dict[str, tuple[str, str]],
    database_url: str,
    ids: list[str],
    lane: dict[str, str] | None = None,
    *,
    packed: bool = False,
) -> None:
    """Each row's message to its own lane's queue (``lane``: each row's, if known); with
    ``packed``, each lane's rows as one batch request's are sent: ten to a message
    (relay_core.queue.pack), ten messages a call."""
    lane = lane or lanes_of(database_url)
    for name, (queue_url, _) in lanes.items():
        mine = [tx_id for tx_id in ids if lane.get(tx_id, "normal") == name]
        if packed:
            trace = Trace(f"rig-batch-{uuid.uuid4().hex[:12]}", "ab" * 16, "cd" * 8, sampled=True)
            when = utcnow().isoformat(timespec="milliseconds") + "Z"
            messages = TransactionMessage.many(
                mine, TxType.direct, trace, [name] * len(mine), timestamp=when
            )
            groups = pack(messages)
            for start in range(0, len(groups), 10):
                await send_packed(sqs, queue_url, groups[start : start + 10])
            continue
        for start in range(0, len(mine), 10):
            batch = mine[start : start + 10]
            messages = [TransactionMessage.new(tx_id, "direct", lane=name) for tx_id in batch]
            await send_batch(sqs, queue_url, messages)


async def feed(
    sqs: Any,
    lanes: dict[str, tuple[str, str]],
    database_url: str,
    ids: list[str],
    rate: float,
    *,
    packed: bool = False,
) -> None:
    """Send the messages of ``ids`` at ``rate`` per second (batches of 10; ``packed``: each
    ten as a batch request's, one message per lane) and mark the rows enqueued, as the API's
    publisher does while clients keep coming."""
    interval = 10 / rate
    started = time.monotonic()
    lane = lanes_of(database_url)
    engine = sync_engine(database_url)
    try:
        for n, start in enumerate(range(0, len(ids), 10)):
            batch = ids[start : start + 10]
            await send_to_lanes(sqs, lanes, database_url, batch, lane, packed=packed)
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
    api_url: str,
    key: str,
    count: int,
    rate: float,
    shape: str,
    *,
    give_up_after_s: float = 120,
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
            body = {"to": DEAD, "data": f"0x{prefix}{i:08x}", "speed": speed_of(shape, i)}
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
                "consumer_id": name,
                "consumer_heartbeat_file": str(self.workdir / f"{name}.heartbeat"),
                **overrides,
            }
        )
        return self._spawn(name, [sys.executable, "-m", "queue_consumer.main"], env)

    def api(self, name: str, port: int, **overrides: str) -> subprocess.Popen[bytes]:
        env = process_env({**self.env, **overrides})
        env.update(PORT=str(port))
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
