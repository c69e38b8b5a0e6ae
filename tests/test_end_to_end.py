"""End to end over real processes: API, consumer, relayer-stub (with webhooks), MariaDB, Redis,
SQS and a client's callback endpoint. 200 transactions reach the end the executor decided, and
every view of them agrees."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from relay_core import cache as cache_mod
from relay_core import queue as queue_mod
from relay_core.settings import InfraSettings
from relay_devstack.localsqs import LocalSqs, free_port
from relay_testkit import infra_process_env, new_api_key, start_stub, stop_processes, wait_http

DEAD = "0x000000000000000000000000000000000000dEaD"
WEBHOOK_KEY = "e2e-webhook-signing-key-0123456789abcdef"
FAIL_MARKER = "badc0ffe"
TOTAL, FAILING = 200, 50


class _Callbacks(BaseHTTPRequestHandler):
    received: list[dict[str, Any]] = []
    lock = threading.Lock()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with self.lock:
            self.received.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def callbacks() -> Iterator[tuple[str, type[_Callbacks]]]:
    handler = type("Callbacks", (_Callbacks,), {"received": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/relay", handler
    finally:
        server.shutdown()


def _final_counts(database_url: str) -> dict[str, int]:
    engine = create_engine(make_url(database_url).set(drivername="mysql+pymysql"))
    with engine.connect() as conn:
        counts: dict[Any, Any] = dict(
            conn.execute(text("SELECT status, COUNT(*) FROM transactions GROUP BY status")).all()
        )
    engine.dispose()
    return {str(k): int(v) for k, v in counts.items()}


def _rows(database_url: str) -> dict[str, dict[str, Any]]:
    engine = create_engine(make_url(database_url).set(drivername="mysql+pymysql"))
    with engine.connect() as conn:
        result = {
            row.id: dict(row._mapping)
            for row in conn.execute(
                text("SELECT id, status, version, hash, request FROM transactions")
            )
        }
    engine.dispose()
    return result


@pytest.mark.timeout(400)
async def test_two_hundred_transactions_end_as_the_executor_decided_and_every_view_agrees(
    infra_env: dict[str, Any],
    sqs_server: LocalSqs,
    sqs: Any,
    tmp_path: Path,
    callbacks: tuple[str, type[_Callbacks]],
) -> None:
    callback_url, received = callbacks
    database_url = infra_env["database_url"]
    await queue_mod.create_queues(sqs, InfraSettings(**infra_env))
    api_port = free_port()
    api_url = f"http://127.0.0.1:{api_port}"
    stub = start_stub(
        tmp_path,
        STUB_WEBHOOK_URL=f"{api_url}/api/v1/webhooks/oz-relayer",
        STUB_WEBHOOK_SIGNING_KEY=WEBHOOK_KEY,
        STUB_WEBHOOK_BACKOFF_MIN_S="0.2",
        STUB_WEBHOOK_BACKOFF_MAX_S="0.5",
    )
    processes: list[subprocess.Popen[bytes]] = []
    try:
        stub.lifecycle(
            paused=False,
            delay_sent_ms=100,
            delay_submitted_ms=100,
            delay_mined_ms=150,
            delay_confirmed_ms=150,
            fail_data_marker=FAIL_MARKER,
        )
        env = infra_process_env(
            infra_env,
            PORT=str(api_port),
            RELAY_EXECUTOR_URL=stub.base_url,
            RELAY_WEBHOOK_SIGNING_KEY=WEBHOOK_KEY,
            RELAY_CONSUMER_HEARTBEAT_FILE=str(tmp_path / "hb"),
            RELAY_TRACKER_STALE_S="5",
            # the client's callback endpoint is on 127.0.0.1, allowed here on purpose
            RELAY_CALLBACK_ALLOW_LOOPBACK="true",
        )
        # 200 transactions and their status reads in a few seconds: above the default rate
        # limit, so this client gets its own (as an operator would give a busy client).
        key = new_api_key(env, "e2e", rate_per_s=1000, burst=2000)
        log = open(tmp_path / "services.log", "ab")  # noqa: SIM115
        for command in (["relay_api.cli", "serve"], ["queue_consumer.main"]):
            processes.append(
                subprocess.Popen([sys.executable, "-m", *command], env=env, stdout=log, stderr=log)
            )
        wait_http(f"{api_url}/health", processes[0])

        headers = {"X-API-Key": key}
        async with httpx.AsyncClient(base_url=api_url, timeout=10) as http:
            registered = await http.put(
                "/api/v1/clients/me/callback", json={"url": callback_url}, headers=headers
            )
            assert registered.status_code == 200
            limit = asyncio.Semaphore(20)

            async def submit(i: int) -> tuple[str, bool]:
                failing = i < FAILING
                data = f"0x{FAIL_MARKER}{i:04x}" if failing else f"0x{i:08x}"
                async with limit:
                    response = await http.post(
                        "/api/v1/relay/direct", json={"to": DEAD, "data": data}, headers=headers
                    )
                assert response.status_code == 202, response.text
                return response.json()["transactionId"], failing

            submitted = dict(await asyncio.gather(*(submit(i) for i in range(TOTAL))))

            deadline = time.monotonic() + 240
            while _final_counts(database_url) != {"confirmed": TOTAL - FAILING, "failed": FAILING}:
                assert time.monotonic() < deadline, _final_counts(database_url)
                await asyncio.sleep(0.5)

            rows = _rows(database_url)
            for tx_id, failing in submitted.items():
                assert rows[tx_id]["status"] == ("failed" if failing else "confirmed")

            # The status endpoint agrees with MySQL...
            for tx_id in submitted:
                status = await http.get(f"/api/v1/relay/status/{tx_id}", headers=headers)
                assert status.status_code == 200
                assert status.json()["status"] == rows[tx_id]["status"]
                assert status.json()["hash"] == rows[tx_id]["hash"]

        # ...so does Redis (never older than MySQL)...
        rows = _rows(database_url)
        redis = cache_mod.connect(infra_env["redis_url"], 1.0)
        cache = cache_mod.StatusCache(redis, infra_env["redis_prefix"])
        for tx_id in submitted:
            cached = await cache.get(tx_id)
            assert cached is not None
            assert cached[0] == rows[tx_id]["version"]
            assert cached[1]["status"] == rows[tx_id]["status"]
        await redis.aclose()

        # ...and so do the client's callbacks, which arrive in order per transaction.
        deadline = time.monotonic() + 60
        while True:
            last: dict[str, list[str]] = {}
            for payload in list(received.received):
                last.setdefault(payload["transactionId"], []).append(payload["status"])
            if all(last.get(t, [""])[-1] == rows[t]["status"] for t in submitted):
                break
            assert time.monotonic() < deadline, "callbacks did not catch up"
            await asyncio.sleep(0.5)
        order = ["processing", "submitted", "mined", "confirmed"]
        for statuses in last.values():
            ranks = [order.index(s) if s in order else len(order) for s in statuses]
            assert ranks == sorted(ranks), statuses
        assert stub.ledger_count() == TOTAL  # and each was executed exactly once
    finally:
        stop_processes(processes)
        stub.stop()
