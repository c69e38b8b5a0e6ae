"""The running service (a real `relay serve` process) enforces what the tests check in-process."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from api_testkit import DEAD

from relay_devstack.localsqs import free_port
from relay_testkit import infra_process_env


@pytest.fixture
def server(
    infra_env: dict[str, Any], queues: tuple[str, str], api_key: str
) -> Iterator[tuple[str, str]]:
    port = free_port()
    env = infra_process_env(
        infra_env,
        PORT=str(port),
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "relay_api.cli", "serve"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert process.poll() is None, process.stdout.read() if process.stdout else ""
        assert time.monotonic() < deadline
        time.sleep(0.1)
    try:
        yield base, api_key
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
        assert process.returncode == 0
        output = process.stdout.read().decode() if process.stdout else ""
        assert api_key not in output  # keys never reach the logs


@pytest.fixture
async def http(server: tuple[str, str]) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server[0], timeout=10) as client:
        yield client


async def test_running_server_validates_accepts_and_serves_status(
    http: httpx.AsyncClient, server: tuple[str, str]
) -> None:
    headers = {"X-API-Key": server[1]}
    bad = await http.post("/api/v1/relay/direct", json={"to": DEAD, "value": 1.5}, headers=headers)
    assert bad.status_code == 422
    assert bad.json()["detail"] == "value: Input should be a valid string"
    ok = await http.post("/api/v1/relay/direct", json={"to": DEAD}, headers=headers)
    assert ok.status_code == 202
    status = await http.get(ok.headers["location"], headers=headers)
    assert status.status_code == 200
    assert status.json()["status"] == "pending"
    assert (await http.get("/ready")).json()["status"] == "ready"


async def test_running_server_refuses_a_chunked_body_over_the_limit_with_413(
    http: httpx.AsyncClient, server: tuple[str, str]
) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"to":"' + DEAD.encode() + b'","data":"0x'
        for _ in range(20):
            yield b"ab" * 4096
        yield b'"}'

    response = await http.post(
        "/api/v1/relay/direct",
        content=chunks(),
        headers={"X-API-Key": server[1], "Content-Type": "application/json"},
    )
    assert response.status_code == 413
    assert response.json()["error"] == "payload_too_large"


async def test_openapi_documents_the_relay_endpoints(http: httpx.AsyncClient) -> None:
    schema = (await http.get("/openapi.json")).json()
    assert {
        "/api/v1/relay/direct",
        "/api/v1/relay/gasless",
        "/api/v1/relay/status/{transactionId}",
        "/health",
        "/ready",
    } <= set(schema["paths"])
    assert (await http.get("/docs")).status_code == 200
