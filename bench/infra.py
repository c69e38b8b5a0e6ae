"""What one benchmark run stands on: a local SQS server, the relayer-stub, scratch MariaDB
databases, a Redis key prefix, and the processes it starts. Everything on 127.0.0.1, all of it
removed at the end (databases dropped, Redis keys deleted, processes stopped)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pymysql
from sqlalchemy import create_engine, insert
from sqlalchemy.engine import URL, make_url

from bench import procstat
from relay_core import apikeys, localsqs
from relay_core import queue as queue_mod
from relay_core.db.models import ApiClient, Base, Transaction, utcnow
from relay_core.settings import DEV_EXECUTOR_KEY, InfraSettings
from relay_testkit import Stub, start_stub, wait_http

ROOT = Path(__file__).resolve().parents[1]
SERVER_URL = make_url(os.environ.get("TEST_DATABASE_URL", "mysql://root@127.0.0.1:3306"))
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
DEAD = "0x000000000000000000000000000000000000dEaD"


class ScenarioFailed(RuntimeError):
    """A scenario did not do what it must (lost or duplicated work, wrong tier, errors)."""


def check(condition: bool, message: str) -> None:
    if not condition:
        raise ScenarioFailed(message)


def _server() -> pymysql.connections.Connection:
    return pymysql.connect(
        host=SERVER_URL.host or "127.0.0.1",
        port=SERVER_URL.port or 3306,
        user=SERVER_URL.username or "root",
        password=SERVER_URL.password or "",
        autocommit=True,
    )


def sync_url(database_url: str) -> URL:
    return make_url(database_url).set(drivername="mysql+pymysql")


@dataclass
class Run:
    """One benchmark run; use as ``async with Run.open(...) as run``."""

    run_id: str
    workdir: Path
    sqs_kind: str
    sqs: localsqs.LocalSqs | None = None
    stub: Stub | None = None
    extra_stubs: list[Stub] = field(default_factory=list)
    databases: list[str] = field(default_factory=list)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    redis_prefix: str = ""
    sqs_version: str = "?"

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, workdir: Path, sqs_kind: str) -> AsyncIterator[Run]:
        run_id = uuid.uuid4().hex[:8]
        run = cls(run_id=run_id, workdir=workdir, sqs_kind=sqs_kind)
        run.redis_prefix = f"relaybench:{run_id}:"
        try:
            run.sqs = localsqs.start(sqs_kind, log_path=workdir / "sqs.log")
            run.sqs_version = sqs_server_version(sqs_kind)
            run.stub = start_stub(
                workdir,
                STUB_LIFECYCLE__PAUSED="true",
                STUB_LOG_LEVEL="WARNING",
            )
            await run.wait_sqs()
            yield run
        finally:
            await run.close()

    async def start_extra_stub(self, name: str) -> Stub:
        """Another relayer-stub (scenarios side by side with different latencies)."""
        directory = self.workdir / name
        directory.mkdir(exist_ok=True)
        stub = await asyncio.to_thread(
            start_stub, directory, STUB_LIFECYCLE__PAUSED="true", STUB_LOG_LEVEL="WARNING"
        )
        self.extra_stubs.append(stub)
        return stub

    # --- SQS -------------------------------------------------------------------------------

    def infra(self, queue_name: str) -> InfraSettings:
        assert self.sqs is not None
        return InfraSettings(
            environment="test",
            aws_endpoint_url=self.sqs.endpoint,
            queue_name=queue_name,
            dlq_name=f"{queue_name}-dlq",
        )

    @contextlib.asynccontextmanager
    async def sqs_client(self, queue_name: str = "bench") -> AsyncIterator[Any]:
        settings = self.infra(queue_name)
        async with queue_mod.sqs_client(
            config=queue_mod.client_config(settings, timeout_s=5.0),
            **queue_mod.sqs_client_kwargs(settings),
        ) as client:
            yield client

    async def wait_sqs(self) -> None:
        deadline = time.monotonic() + 30
        async with self.sqs_client() as sqs:
            while True:
                try:
                    await sqs.list_queues()
                    return
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.2)

    async def create_queues(self, sqs: Any, queue_name: str) -> tuple[str, str]:
        return await queue_mod.create_queues(sqs, self.infra(queue_name))

    # --- MariaDB ---------------------------------------------------------------------------

    def database(self, label: str) -> str:
        """A fresh scratch database with the schema; returns its mysql:// URL."""
        name = f"relay_bench_{self.run_id}_{label}"
        conn = _server()
        try:
            with conn.cursor() as cursor:
                cursor.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        finally:
            conn.close()
        self.databases.append(name)
        url = SERVER_URL.set(drivername="mysql+pymysql", database=name)
        engine = create_engine(url)
        Base.metadata.create_all(engine)
        engine.dispose()
        return SERVER_URL.set(drivername="mysql", database=name).render_as_string(
            hide_password=False
        )

    def drop_database(self, database_url: str) -> None:
        name = make_url(database_url).database
        conn = _server()
        try:
            with conn.cursor() as cursor:
                cursor.execute(
                    "SELECT id FROM information_schema.processlist WHERE db = %s", (name,)
                )
                for (connection_id,) in cursor.fetchall():
                    with contextlib.suppress(pymysql.err.OperationalError):
                        cursor.execute(f"KILL {int(connection_id)}")
                cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
        finally:
            conn.close()
        if name in self.databases:
            self.databases.remove(name)

    # --- processes -------------------------------------------------------------------------

    def spawn(
        self, name: str, args: Sequence[str], env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
        process = subprocess.Popen(
            [sys.executable, *args],
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self.processes.append(process)
        return process

    def stop(self, process: subprocess.Popen[bytes], timeout_s: float = 30.0) -> int:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process in self.processes:
            self.processes.remove(process)
        return int(process.returncode)

    async def stop_async(self, process: subprocess.Popen[bytes], timeout_s: float = 30.0) -> int:
        return await asyncio.to_thread(self.stop, process, timeout_s)

    def consumer_env(
        self, database_url: str, queue_name: str, index: int, **overrides: Any
    ) -> dict[str, str]:
        assert self.sqs is not None
        assert self.stub is not None
        env = {
            "RELAY_ENV": "test",
            "DATABASE_URL": database_url,
            "AWS_ENDPOINT_URL": self.sqs.endpoint,
            "REDIS_URL": REDIS_URL,
            "RELAY_REDIS_PREFIX": self.redis_prefix,
            "RELAY_EXECUTOR_URL": self.stub.base_url,
            "RELAY_QUEUE_NAME": queue_name,
            "RELAY_DLQ_NAME": f"{queue_name}-dlq",
            "RELAY_CONSUMER_ID": f"bench-{self.run_id}-{index}",
            "RELAY_CONSUMER_HEARTBEAT_FILE": str(self.workdir / f"heartbeat-{queue_name}-{index}"),
        }
        env.update({f"RELAY_{k.upper()}": str(v) for k, v in overrides.items()})
        return env

    def spawn_consumer(
        self, database_url: str, queue_name: str, index: int = 0, **overrides: Any
    ) -> subprocess.Popen[bytes]:
        env = self.consumer_env(database_url, queue_name, index, **overrides)
        env["BENCH_COUNTS_FILE"] = str(self.counts_file(queue_name, index))
        # An earlier consumer's heartbeat would make wait_consumer_polling return at once.
        (self.workdir / f"heartbeat-{queue_name}-{index}").unlink(missing_ok=True)
        # queue_consumer.main, unchanged, behind a launcher that counts its I/O calls.
        return self.spawn(
            f"consumer-{queue_name}-{index}", ["-m", "bench.servers", "consumer"], env
        )

    def counts_file(self, queue_name: str, index: int) -> Path:
        return self.workdir / f"counts-{queue_name}-{index}.json"

    async def wait_consumer_polling(self, queue_name: str, index: int, process: Any) -> None:
        """The heartbeat file appears once the consumer's loops run (queues found)."""
        path = self.workdir / f"heartbeat-{queue_name}-{index}"
        deadline = time.monotonic() + 60
        while not path.exists():
            check(process.poll() is None, f"consumer exited with {process.returncode}")
            check(time.monotonic() < deadline, "consumer did not start within 60 s")
            await asyncio.sleep(0.1)

    def spawn_server(
        self, name: str, kind: str, env: dict[str, str] | None = None
    ) -> tuple[subprocess.Popen[bytes], int]:
        port = localsqs.free_port()
        process = self.spawn(
            name, ["-m", "bench.servers", kind], {**(env or {}), "PORT": str(port)}
        )
        return process, port

    def api_env(self, database_url: str, queue_name: str) -> dict[str, str]:
        assert self.sqs is not None
        assert self.stub is not None
        return {
            "RELAY_ENV": "test",
            "DATABASE_URL": database_url,
            "AWS_ENDPOINT_URL": self.sqs.endpoint,
            "REDIS_URL": REDIS_URL,
            "RELAY_REDIS_PREFIX": self.redis_prefix,
            "RELAY_EXECUTOR_URL": self.stub.base_url,
            "RELAY_QUEUE_NAME": queue_name,
            "RELAY_DLQ_NAME": f"{queue_name}-dlq",
        }

    async def wait_http(self, url: str, process: subprocess.Popen[bytes]) -> None:
        await asyncio.to_thread(wait_http, url, process, 60)

    # --- the end ---------------------------------------------------------------------------

    async def close(self) -> None:
        for process in list(self.processes):
            with contextlib.suppress(Exception):
                self.stop(process, 10)
        for name in list(self.databases):
            with contextlib.suppress(Exception):
                self.drop_database(
                    SERVER_URL.set(database=name).render_as_string(hide_password=False)
                )
        if self.redis_prefix:
            with contextlib.suppress(Exception):
                await delete_redis_prefix(self.redis_prefix)
        for stub in [self.stub, *self.extra_stubs]:
            if stub is not None:
                with contextlib.suppress(Exception):
                    stub.stop()
        if self.sqs is not None:
            self.sqs.stop()

    def server_pids(self) -> dict[str, int]:
        """The shared servers whose CPU is worth watching during a scenario."""
        pids: dict[str, int] = {}
        if self.sqs is not None:
            pids["sqs"] = self.sqs.process.pid
        if self.stub is not None and self.stub.process is not None:
            pids["stub"] = self.stub.process.pid
        for comm, label in (("mariadbd", "mariadb"), ("redis-server", "redis")):
            found = procstat.find_pids(comm)
            if found:
                pids[label] = found[0]
        return pids


def sqs_server_version(kind: str) -> str:
    """The local SQS server's name and installed version (read from its dist-info)."""
    import importlib.metadata

    if kind == "ministack":
        executable = localsqs.ministack_executable()
        if executable:
            venv = Path(executable).resolve().parent.parent
            for info in sorted(venv.glob("lib/python*/site-packages/ministack-*.dist-info")):
                return f"ministack {info.name.removeprefix('ministack-').split('.dist')[0]}"
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return f"ministack {importlib.metadata.version('ministack')}"
        return "ministack"
    if kind == "moto":
        return f"moto server {importlib.metadata.version('moto')}"
    if kind == "localstack":
        return f"localstack-core {localsqs.localstack_version()}"
    return kind


async def delete_redis_prefix(prefix: str) -> int:
    from redis.asyncio import Redis

    redis = Redis.from_url(REDIS_URL)
    deleted = 0
    try:
        batch: list[bytes] = []
        async for key in redis.scan_iter(match=f"{prefix}*", count=1000):
            batch.append(key)
            if len(batch) >= 500:
                deleted += await redis.delete(*batch)
                batch = []
        if batch:
            deleted += await redis.delete(*batch)
    finally:
        await redis.aclose()
    return deleted


# --- rows and messages, bypassing the API --------------------------------------------------


def create_client(
    database_url: str,
    key: str | None = None,
    name: str = "bench",
    *,
    spend_policy: str | None = None,
    allowed_to: str = DEAD,
) -> str:
    """Insert an API client (with ``key`` if given) whose rate limit the benchmarks cannot
    reach; returns its id. ``spend_policy``: ``rules`` sets every per-transaction rule of a
    spend policy (``allowed_to`` the one destination allowed), ``budget`` those and a daily
    budget (a reservation on each request), ``fees`` those and a fee budget (``maxFeeWei``,
    ``dailyFeeWei``, the speeds); the benchmark's requests break none of them."""
    engine = create_engine(sync_url(database_url))
    client_id = str(uuid.uuid4())
    secret = key or apikeys.generate_key()
    with engine.begin() as conn:
        conn.execute(
            insert(ApiClient).values(
                id=client_id,
                name=name,
                role="client",
                key_hash=apikeys.hash_key(secret),
                key_prefix=apikeys.display_prefix(secret),
                created_at=utcnow(),
                # Its own rate limit, far above what the load generator sends: the limiter
                # runs on every request (a Redis script call), and never refuses one.
                rate_limit_per_s=1_000_000.0,
                policy_granted_at=utcnow(),
                rate_limit_burst=1_000_000,
                **(
                    {
                        "policy_allowed_to": [allowed_to.lower()],
                        "policy_max_value_wei": str(10**18),
                        "policy_daily_value_wei": str(10**30) if spend_policy != "rules" else None,
                        "policy_max_gas": 1_000_000,
                    }
                    | (
                        {  # a fee budget too: every request is priced and reserves its fee
                            "policy_max_fee_wei": str(10**30),
                            "policy_daily_fee_wei": str(10**30),
                            "policy_speeds": ["average", "fast"],
                        }
                        if spend_policy == "fees"
                        else {}
                    )
                    if spend_policy
                    else {}
                ),
            )
        )
    engine.dispose()
    return client_id


def seed_rows(
    database_url: str,
    count: int,
    *,
    client_id: str | None = None,
    status: str = "pending",
    executor_ids: Sequence[str] | None = None,
    start_index: int = 0,
    to: str = DEAD,
    value: str = "0",
) -> list[str]:
    """Bulk-insert ``count`` transactions (distinct calldata each), like the consumer tests'
    seed_rows. ``executor_ids`` marks them as known to the executor (status refresh)."""
    client_id = client_id or create_client(database_url, name="seed")
    engine = create_engine(sync_url(database_url))
    now = utcnow()
    ids = [str(uuid.uuid4()) for _ in range(count)]
    rows = []
    for i, tx_id in enumerate(ids):
        row: dict[str, Any] = {
            "id": tx_id,
            "client_id": client_id,
            "type": "direct",
            "status": status,
            "version": 1,
            "request": {
                "to": to,
                "data": f"0x{start_index + i:08x}",
                "value": value,
                "gasLimit": "100000",  # what a client under a gas rule names (--spend-policy)
                "speed": "fast",
            },
            "request_fingerprint": uuid.uuid4().hex,
            "attempts": 0 if status == "pending" else 1,
            "enqueued_at": now,
            "created_at": now - timedelta(seconds=60),
            "updated_at": now - timedelta(seconds=60),
        }
        if executor_ids is not None:
            row["executor_tx_id"] = executor_ids[i]
            row["submitted_at"] = now - timedelta(seconds=60)
        rows.append(row)
    with engine.begin() as conn:
        for start in range(0, len(rows), 1000):
            conn.execute(insert(Transaction), rows[start : start + 1000])
    engine.dispose()
    return ids


async def send_messages(
    sqs: Any,
    queue_url: str,
    ids: Sequence[str],
    senders: int = 8,
    progress: list[int] | None = None,
) -> None:
    """One message per id (batches of 10, a few senders in parallel); ``progress[0]`` counts
    the messages sent so far."""
    messages = [queue_mod.TransactionMessage.new(tx_id, "direct") for tx_id in ids]
    batches = [messages[i : i + 10] for i in range(0, len(messages), 10)]
    position = iter(range(len(batches)))

    async def sender() -> None:
        for index in position:
            sent = await queue_mod.send_batch(sqs, queue_url, batches[index])
            check(len(sent) == len(batches[index]), "SQS refused part of a preload batch")
            if progress is not None:
                progress[0] += len(sent)

    await asyncio.gather(*(sender() for _ in range(senders)))


async def queue_remaining(sqs: Any, queue_url: str) -> int:
    attributes = (
        await sqs.get_queue_attributes(
            QueueUrl=queue_url,
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            ],
        )
    )["Attributes"]
    return sum(int(value) for value in attributes.values())


async def submit_to_stub(stub: Stub, count: int) -> list[str]:
    """Create ``count`` transactions at the executor directly (for the status refresh tier)."""
    url = f"{stub.base_url}/api/v1/relayers/relayer-1/transactions"
    headers = {"Authorization": f"Bearer {DEV_EXECUTOR_KEY}"}
    ids: list[str] = []
    async with httpx.AsyncClient(timeout=10) as http:

        async def one(i: int) -> None:
            body = {"to": DEAD, "data": f"0x{0xF0000000 + i:08x}", "value": "0", "speed": "fast"}
            response = await http.post(url, json=body, headers=headers)
            response.raise_for_status()
            ids.append(response.json()["data"]["id"])

        for start in range(0, count, 16):
            await asyncio.gather(*(one(i) for i in range(start, min(count, start + 16))))
    return ids


async def stub_ledger(stub: Stub, **filters: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=stub.base_url, timeout=30) as http:
        response = await http.get("/__admin/ledger", params={"limit": 100_000, **filters})
        response.raise_for_status()
        return list(response.json()["entries"])


async def stub_ledger_count(stub: Stub, **filters: str) -> int:
    async with httpx.AsyncClient(base_url=stub.base_url, timeout=10) as http:
        response = await http.get("/__admin/ledger", params={"limit": 1, **filters})
        response.raise_for_status()
        return int(response.json()["count"])


async def stub_configure(stub: Stub, latency_ms: int) -> None:
    """Empty ledger, lifecycle paused, ``latency_ms`` on every send."""
    async with httpx.AsyncClient(base_url=stub.base_url, timeout=10) as http:
        (await http.post("/__admin/reset")).raise_for_status()
        (await http.put("/__admin/lifecycle", json={"paused": True})).raise_for_status()
        faults: dict[str, Any] = {}
        if latency_ms:
            faults = {"scope": "submit", "latency": {"dist": "fixed", "ms": latency_ms}}
        (await http.put("/__admin/faults", json=faults)).raise_for_status()


async def run_loadgen(run: Run, spec: dict[str, Any], name: str) -> dict[str, Any]:
    """Run the load generator as its own process; returns its JSON result."""
    spec_path = run.workdir / f"loadgen-{name}.json"
    spec_path.write_text(json.dumps(spec))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.loadgen",
        str(spec_path),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    if process.returncode != 0:
        raise ScenarioFailed(f"load generator failed ({name}): {err.decode()[-2000:]}")
    return dict(json.loads(out.decode().strip().splitlines()[-1]))
