"""Helpers for the relayer-stub tests: the real app in-process over httpx (lifespan and all), a
real local HTTP server that receives webhooks, and a real ``relayer-stub`` process on a free
loopback port."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from relayer_stub.app import create_app
from relayer_stub.runtime import Runtime
from relayer_stub.settings import DEV_API_KEY, StubSettings

API_KEY = "test-api-key-0123456789-0123456789-abcdef"
DEAD = "0x000000000000000000000000000000000000dEaD"
FINAL = {"confirmed", "failed", "canceled", "expired"}
# Zero delays: a transaction is final a few event-loop turns after it is accepted.
FAST_LIFECYCLE = {
    "delay_sent_ms": 0,
    "delay_submitted_ms": 0,
    "delay_mined_ms": 0,
    "delay_confirmed_ms": 0,
}


def tx_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "to": DEAD,
        "value": "1000000000000",
        "data": "0x",
        "gas_limit": 21000,
        "speed": "fast",
    }
    body.update(overrides)
    return {key: value for key, value in body.items() if value is not ...}


@dataclass
class Stub:
    """The app in-process: an httpx client with the Bearer key, and its runtime."""

    client: httpx.AsyncClient
    runtime: Runtime
    settings: StubSettings
    relayer: str = "relayer-1"
    auth: dict[str, str] = field(default_factory=dict)

    @property
    def tx_path(self) -> str:
        return f"/api/v1/relayers/{self.relayer}/transactions"

    async def send(self, **overrides: Any) -> httpx.Response:
        return await self.client.post(self.tx_path, json=tx_body(**overrides), headers=self.auth)

    async def send_ok(self, **overrides: Any) -> dict[str, Any]:
        response = await self.send(**overrides)
        assert response.status_code == 200, response.text
        data: dict[str, Any] = response.json()["data"]
        return data

    async def replace(self, tx_id: str, **overrides: Any) -> httpx.Response:
        """``PUT`` the transaction with a send's body (``tx_body`` with ``overrides``)."""
        return await self.client.put(
            f"{self.tx_path}/{tx_id}", json=tx_body(**overrides), headers=self.auth
        )

    async def get(self, tx_id: str) -> httpx.Response:
        return await self.client.get(f"{self.tx_path}/{tx_id}", headers=self.auth)

    async def tx(self, tx_id: str) -> dict[str, Any]:
        response = await self.get(tx_id)
        assert response.status_code == 200, response.text
        data: dict[str, Any] = response.json()["data"]
        return data

    async def wait_for(
        self, tx_id: str, statuses: set[str] | str = frozenset(FINAL), timeout_s: float = 5.0
    ) -> dict[str, Any]:
        wanted = {statuses} if isinstance(statuses, str) else set(statuses)
        deadline = time.monotonic() + timeout_s
        while True:
            tx = await self.tx(tx_id)
            if tx["status"] in wanted:
                return tx
            assert time.monotonic() < deadline, f"{tx_id} stuck in {tx['status']}, not {wanted}"
            await asyncio.sleep(0.01)

    async def ledger(self, **filters: Any) -> dict[str, Any]:
        response = await self.client.get("/__admin/ledger", params=filters)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    async def admin(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        response = await self.client.request(method, f"/__admin/{path}", json=body)
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result


def make_settings(tmp_path: Path, **overrides: Any) -> StubSettings:
    """Test settings: zero lifecycle delays (a ``lifecycle`` override is merged into them),
    fast maintenance, flush and webhook back-off."""
    lifecycle = FAST_LIFECYCLE | overrides.pop("lifecycle", {})
    values: dict[str, Any] = {
        "api_key": API_KEY,
        "ledger_path": str(tmp_path / "ledger.sqlite3"),
        "lifecycle": lifecycle,
        "maintenance_interval_s": 0.02,
        "persist_interval_s": 0.02,
        "webhook_backoff_min_s": 0.05,
        "webhook_backoff_max_s": 0.2,
        "webhook_timeout_s": 2.0,
        **overrides,
    }
    return StubSettings(_env_file=None, **values)  # type: ignore[call-arg]


@asynccontextmanager
async def running(settings: StubSettings) -> AsyncIterator[Stub]:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://stub.test") as client:
            yield Stub(
                client=client,
                runtime=app.state.runtime,
                settings=settings,
                auth={"Authorization": f"Bearer {settings.api_key.get_secret_value()}"},
            )


# -- a real HTTP server receiving webhooks ------------------------------------------------------


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes


class WebhookReceiver:
    """A threaded HTTP server on 127.0.0.1 that records every POST and answers with the next
    scripted status (200 once the script runs out)."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self.script: list[int] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                with receiver._lock:
                    receiver.received.append(Received(dict(self.headers.items()), body))
                    status = receiver.script.pop(0) if receiver.script else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/relayer"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def bodies(self) -> list[bytes]:
        with self._lock:
            return [r.body for r in self.received]

    async def wait_for_count(self, count: int, timeout_s: float = 5.0) -> list[Received]:
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                if len(self.received) >= count:
                    return list(self.received)
            assert time.monotonic() < deadline, f"got {len(self.received)} of {count} webhooks"
            await asyncio.sleep(0.01)


# -- a real relayer-stub process ----------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class StubProcess:
    process: subprocess.Popen[bytes]
    base_url: str
    log_path: Path
    api_key: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}

    def log(self) -> str:
        return self.log_path.read_text()


def _console_script() -> list[str]:
    script = Path(sys.executable).parent / "relayer-stub"
    return [str(script)] if script.exists() else [sys.executable, "-m", "relayer_stub.main"]


def start_stub_process(tmp_path: Path, ledger: Path, **env: str) -> StubProcess:
    port = free_port()
    log_path = tmp_path / f"stub-{port}.log"
    environment = {
        key: value for key, value in os.environ.items() if not key.startswith("STUB_")
    } | {
        "STUB_PORT": str(port),
        "STUB_LEDGER_PATH": str(ledger),
        "STUB_LIFECYCLE": '{"delay_sent_ms":0,"delay_submitted_ms":0,'
        '"delay_mined_ms":0,"delay_confirmed_ms":0}',
        **env,
    }
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            _console_script(), env=environment, stdout=log_file, stderr=subprocess.STDOUT
        )
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{base_url}/api/v1/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if process.poll() is not None:
            raise AssertionError(f"relayer-stub exited while starting:\n{log_path.read_text()}")
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError("relayer-stub did not start within 30 s")
        time.sleep(0.05)
    return StubProcess(process, base_url, log_path, env.get("STUB_API_KEY", DEV_API_KEY))


def stop_stub_process(stub: StubProcess, sig: int = signal.SIGTERM) -> int:
    if stub.process.poll() is None:
        stub.process.send_signal(sig)
        try:
            stub.process.wait(15)
        except subprocess.TimeoutExpired:
            stub.process.kill()
            stub.process.wait()
    return stub.process.returncode
