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
from pathlib import Path
from typing import Any

import pymysql
from sqlalchemy import create_engine
from sqlalchemy.engine import URL, make_url

from bench import procstat
from relay_core import queue as queue_mod
from relay_core.db.models import Base
from relay_core.settings import InfraSettings
from relay_devstack import localsqs
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
