"""Test support shared by every package's tests: a relayer-stub process and its admin API,
`relay` commands as processes, a process environment for a test's infrastructure.

A dev dependency only (the workspace's dev group): no service installs it. It starts the stub
and the CLI as commands, never imports them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from relay_devstack.localsqs import free_port

STUB_DEV_KEY = "relayer-stub-dev-api-key-0123456789abcdef"


def wait_http(url: str, process: subprocess.Popen[bytes] | None, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"process serving {url} exited with {process.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not answer within {timeout_s} s")
        time.sleep(0.1)


@dataclass
class Stub:
    """A relayer-stub process and its admin API (see services/relayer-stub/README.md)."""

    port: int
    ledger_path: Path
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Stub:
        env = {
            **os.environ,
            "STUB_PORT": str(self.port),
            "STUB_LEDGER_PATH": str(self.ledger_path),
            "STUB_LOG_LEVEL": "WARNING",
            **self.env,
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "relayer_stub.main"], env=env, stdout=subprocess.DEVNULL
        )
        wait_http(f"{self.base_url}/api/v1/health", self.process)
        return self

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(20)

    def _http(self) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=10)

    def reset(self) -> None:
        with self._http() as http:
            http.post("/__admin/reset").raise_for_status()
        self.faults()
        self.lifecycle(paused=True)

    def faults(self, **config: Any) -> None:
        with self._http() as http:
            http.put("/__admin/faults", json=config).raise_for_status()

    def lifecycle(self, **config: Any) -> None:
        with self._http() as http:
            http.put("/__admin/lifecycle", json=config).raise_for_status()

    def webhook(self, url: str | None, signing_key: str | None) -> None:
        with self._http() as http:
            http.put("/__admin/webhook", json={"url": url, "signing_key": signing_key})

    def ledger(self, **filters: Any) -> tuple[int, list[dict[str, Any]]]:
        with self._http() as http:
            body = http.get("/__admin/ledger", params={"limit": 100_000, **filters}).json()
        return int(body["count"]), list(body["entries"])

    def ledger_count(self) -> int:
        return self.ledger()[0]


def stop_processes(processes: list[subprocess.Popen[bytes]], timeout_s: float = 30) -> None:
    """SIGTERM to each (they drain as in production), then wait; whatever outlives
    ``timeout_s`` is killed."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def start_stub(directory: Path, port: int | None = None, **env: str) -> Stub:
    return Stub(port or free_port(), directory / "relayer-stub.sqlite3", env).start()


def infra_process_env(infra: dict[str, Any], **extra: str) -> dict[str, str]:
    """The environment of a Relay process pointed at a test's ``infra_env`` (its database,
    queues and Redis prefix), with ``extra`` variables on top."""
    return {
        **os.environ,
        "RELAY_ENV": "test",
        "DATABASE_URL": infra["database_url"],
        "AWS_ENDPOINT_URL": infra["aws_endpoint_url"],
        "RELAY_QUEUE_NAME": infra["queue_name"],
        "RELAY_DLQ_NAME": infra["dlq_name"],
        "REDIS_URL": infra["redis_url"],
        "RELAY_REDIS_PREFIX": infra["redis_prefix"],
        **extra,
    }


def relay_command(env: dict[str, str], *args: str) -> str:
    """Run the operator's ``relay`` command as a process; returns what it printed."""
    return subprocess.run(
        [sys.executable, "-m", "relay_api.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout


def new_api_key(
    env: dict[str, str],
    name: str,
    *,
    admin: bool = False,
    role: str | None = None,
    policy: tuple[str, ...] = ("--any-destination",),
    rate_per_s: float | None = None,
    burst: int | None = None,
) -> str:
    """A client made as an operator makes one (``relay keys create``): a client's key with
    ``policy`` (the options of ``relay keys create``; by default granted with any destination
    and no limit, () for none: it may then submit nothing), or an admin's or operator's;
    optionally with its own rate limit (``relay clients policy``). Returns its key."""
    role = role or ("admin" if admin else "client")
    create = ["keys", "create", "--name", name, "--role", role]
    if role == "client":
        create += policy
    key = relay_command(env, *create).strip().splitlines()[-1]
    if rate_per_s is not None and burst is not None:
        relay_command(
            env, "clients", "policy", name, "--rate-per-s", str(rate_per_s), "--burst", str(burst)
        )
    return key


def unfinished(database_url: str) -> set[str]:
    """The ids of the transactions not yet in a final status (a MySQL/MariaDB URL)."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    engine = create_engine(make_url(database_url).set(drivername="mysql+pymysql"))
    try:
        with engine.connect() as conn:
            return {
                row[0]
                for row in conn.execute(
                    text(
                        "SELECT id FROM transactions WHERE status NOT IN "
                        "('confirmed','failed','expired','canceled')"
                    )
                )
            }
    finally:
        engine.dispose()
