"""The system a soak runs against, as a user deploys it, on 127.0.0.1: the API, two consumers,
the relayer-stub in memory mode (its webhooks to the API, as the executor's would be), MariaDB
(reached through a proxy the nemesis can cut), Redis and a local SQS server on a port of its
own (so it can be killed and started again where the processes expect it). Every process runs
the shipped defaults; each can be killed, stopped and started again."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from bench.infra import REDIS_URL, ROOT, Run
from relay_core import queue as queue_mod
from relay_core.settings import InfraSettings
from relay_devstack import localsqs
from relay_testkit import Stub, new_api_key, start_stub, wait_http
from relay_testkit.tcpproxy import TcpProxy

# The executor walks every transaction to `confirmed` within a fraction of a second, telling
# the API by webhook at each step (and the consumers' tracker follows what a webhook missed).
STUB_LIFECYCLE = (
    '{"paused": false, "delay_sent_ms": 50, "delay_submitted_ms": 50, '
    '"delay_mined_ms": 50, "delay_confirmed_ms": 50}'
)
CONSUMERS = ("consumer-0", "consumer-1")


@dataclass
class System:
    run: Run
    workdir: Path
    database_url: str  # direct, for the soak's own reads
    proxy: TcpProxy
    sqs_port: int
    queue_name: str
    api_port: int
    webhook_key: str = field(default_factory=lambda: secrets.token_hex(24))
    sqs: localsqs.LocalSqs | None = None
    stub: Stub | None = None
    api: subprocess.Popen[bytes] | None = None
    consumers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)
    key: str = ""

    # --- shape -----------------------------------------------------------------------------

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def env(self) -> dict[str, str]:
        """Where every Relay process finds the rest; nothing else is set."""
        assert self.stub is not None
        proxied = make_url(self.database_url).set(host="127.0.0.1", port=self.proxy.port)
        return {
            "RELAY_ENV": "test",
            "DATABASE_URL": proxied.render_as_string(hide_password=False),
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{self.sqs_port}",
            "REDIS_URL": REDIS_URL,
            "RELAY_REDIS_PREFIX": self.run.redis_prefix,
            "RELAY_EXECUTOR_URL": self.stub.base_url,
            "RELAY_QUEUE_NAME": self.queue_name,
            "RELAY_DLQ_NAME": f"{self.queue_name}-dlq",
            "RELAY_WEBHOOK_SIGNING_KEY": self.webhook_key,
        }

    def infra(self) -> InfraSettings:
        return InfraSettings(
            environment="test",
            aws_endpoint_url=f"http://127.0.0.1:{self.sqs_port}",
            queue_name=self.queue_name,
            dlq_name=f"{self.queue_name}-dlq",
        )

    # --- SQS -------------------------------------------------------------------------------

    async def start_sqs(self) -> None:
        self.sqs = await asyncio.to_thread(
            localsqs.start, port=self.sqs_port, log_path=self.workdir / "sqs.log"
        )
        settings = self.infra()
        async with queue_mod.sqs_client(
            config=queue_mod.client_config(settings), **queue_mod.sqs_client_kwargs(settings)
        ) as sqs:
            await queue_mod.create_queues(sqs, settings)

    def kill_sqs(self) -> None:
        if self.sqs is not None:
            self.sqs.kill()

    # --- the executor ----------------------------------------------------------------------

    def start_stub(self, port: int | None = None) -> None:
        self.stub = start_stub(
            self.workdir,
            port=port,
            STUB_LIFECYCLE=STUB_LIFECYCLE,
            STUB_LOG_LEVEL="WARNING",
            STUB_WEBHOOK_URL=f"{self.api_url}/api/v1/webhooks/oz-relayer",
            STUB_WEBHOOK_SIGNING_KEY=self.webhook_key,
        )

    def restart_stub(self, *, kill: bool) -> None:
        assert self.stub is not None
        (self.stub.kill if kill else self.stub.stop)()
        self.stub.start()

    # --- Relay's processes -----------------------------------------------------------------

    def _spawn(self, name: str, args: list[str], extra: dict[str, str]) -> subprocess.Popen[bytes]:
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
        process = subprocess.Popen(
            [sys.executable, *args],
            cwd=ROOT,
            env={**os.environ, **self.env(), **extra},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        return process

    def start_api(self) -> None:
        self.api = self._spawn(
            "api", ["-m", "relay_api.cli", "serve"], {"PORT": str(self.api_port)}
        )
        wait_http(f"{self.api_url}/health", self.api, 60)

    def kill_api(self) -> None:
        assert self.api is not None
        self.api.send_signal(signal.SIGKILL)
        self.api.wait()

    def start_consumer(self, name: str) -> None:
        self.consumers[name] = self._spawn(
            name,
            ["-m", "queue_consumer.main"],
            {
                "RELAY_CONSUMER_ID": f"soak-{name}-{uuid.uuid4().hex[:6]}",
                "RELAY_CONSUMER_HEARTBEAT_FILE": str(self.workdir / f"{name}.heartbeat"),
            },
        )

    def stop_consumer(self, name: str, *, kill: bool) -> None:
        process = self.consumers[name]
        if kill:
            process.send_signal(signal.SIGKILL)
            process.wait()
        else:
            process.terminate()
            process.wait(150)
        self.restarts[name] = self.restarts.get(name, 0) + 1

    def relay(self, *args: str) -> str:
        """The operator's ``relay`` command against this system."""
        return subprocess.run(
            [sys.executable, "-m", "relay_api.cli", *args],
            env={**os.environ, **self.env()},
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
            cwd=ROOT,
        ).stdout

    def client_key(self) -> str:
        env = {**os.environ, **self.env()}
        return new_api_key(env, f"soak-{uuid.uuid4().hex[:6]}", rate_per_s=1000, burst=2000)

    def pids(self) -> dict[str, int]:
        found = {name: p.pid for name, p in self.consumers.items() if p.poll() is None}
        if self.api is not None and self.api.poll() is None:
            found["api"] = self.api.pid
        return found

    def stop_all(self) -> None:
        processes: list[Any] = [self.api, *self.consumers.values()]
        for process in processes:
            if process is not None and process.poll() is None:
                process.terminate()
        for process in processes:
            if process is not None:
                try:
                    process.wait(150)
                except subprocess.TimeoutExpired:
                    process.kill()
        if self.stub is not None:
            self.stub.kill()
        self.kill_sqs()
