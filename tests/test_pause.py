"""Pause, drain and resume on real processes (the API, two consumers, the relayer-stub, SQS):
paused, a thousand queued transactions wait in SQS untouched (nothing received, nothing
dead-lettered, nothing executed) for the whole pause; resumed, every one is executed once.
Drained, what is queued is finished and the lane then pauses by itself."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from relay_core import queue as queue_mod
from relay_core.localsqs import free_port, stop_process
from relay_core.settings import InfraSettings
from relay_core.testing import infra_process_env, new_api_key, relay_command, start_stub, wait_http

DEAD = "0x000000000000000000000000000000000000dEaD"
QUEUED = 1000
PAUSE_WINDOW_S = 10


def _statuses(database_url: str) -> dict[str, int]:
    engine = create_engine(make_url(database_url).set(drivername="mysql+pymysql"))
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT status, COUNT(*) FROM transactions GROUP BY status"))
        counts = {str(status): int(count) for status, count in rows}
    engine.dispose()
    return counts


def _status(env: dict[str, str]) -> dict[str, Any]:
    return dict(json.loads(relay_command(env, "queues", "status", "--json")))


async def _until(what: str, check: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        await asyncio.sleep(0.5)


@pytest.mark.ops
@pytest.mark.timeout(300)
async def test_pause_holds_a_thousand_messages_untouched_and_resume_drains_them(
    infra_env: dict[str, Any], sqs: Any, tmp_path: Path
) -> None:
    await queue_mod.create_queues(sqs, InfraSettings(**infra_env))
    database_url = infra_env["database_url"]
    api_port = free_port()
    stub = start_stub(tmp_path)
    processes: list[subprocess.Popen[bytes]] = []
    try:
        stub.lifecycle(
            paused=False,
            delay_sent_ms=10,
            delay_submitted_ms=10,
            delay_mined_ms=10,
            delay_confirmed_ms=10,
        )
        env = infra_process_env(
            infra_env,
            PORT=str(api_port),
            RELAY_EXECUTOR_URL=stub.base_url,
            RELAY_CONSUMER_CONTROL_INTERVAL_S="1",
            RELAY_TRACKER_STALE_S="2",
        )
        key = new_api_key(env, "busy", rate_per_s=5000, burst=5000)
        admin = new_api_key(env, "ops", admin=True)
        with open(tmp_path / "services.log", "ab") as log:
            processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "relay_api.cli", "serve"],
                    env=env,
                    stdout=log,
                    stderr=log,
                )
            )
            for i in range(2):
                processes.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "queue_consumer.main"],
                        env={
                            **env,
                            "RELAY_CONSUMER_ID": f"consumer-{i}",
                            "RELAY_CONSUMER_HEARTBEAT_FILE": str(tmp_path / f"hb{i}"),
                        },
                        stdout=log,
                        stderr=log,
                    )
                )
        wait_http(f"http://127.0.0.1:{api_port}/health", processes[0])
        await _until(
            "both consumers report running",
            lambda: [c["state"] for c in _status(env)["consumers"]] == ["running"] * 2,
            60,
        )

        # Pause, and wait until both consumers say they obey.
        paused = relay_command(env, "queues", "pause", "--reason", "maintenance", "--wait")
        assert "2 consumer(s) paused" in paused, paused

        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{api_port}", timeout=30) as http:
            limit = asyncio.Semaphore(20)

            async def submit(i: int) -> None:
                async with limit:
                    response = await http.post(
                        "/api/v1/relay/direct",
                        json={"to": DEAD, "data": f"0x{i:08x}"},
                        headers={"X-API-Key": key},
                    )
                assert response.status_code == 202, response.text

            await asyncio.gather(*(submit(i) for i in range(QUEUED)))
            # A client key may not switch lanes.
            refused = await http.patch(
                "/api/v1/admin/queues/normal", json={"state": "running"}, headers={"X-API-Key": key}
            )
            assert refused.status_code == 403, refused.text

            await _until(
                "the outbox has sent every message",
                lambda: _status(env)["depths"]["queue"]["visible"] == QUEUED,
                30,
            )
            await asyncio.sleep(PAUSE_WINDOW_S)
            view = _status(env)
            assert view["lanes"][0]["state"] == "paused"
            assert view["lanes"][0]["reason"] == "maintenance"
            assert [c["state"] for c in view["consumers"]] == ["paused", "paused"]
            assert view["depths"]["queue"] == {"visible": QUEUED, "inFlight": 0, "delayed": 0}
            assert view["depths"]["dlq"]["visible"] == 0
            assert _statuses(database_url) == {"pending": QUEUED}
            assert stub.ledger_count() == 0

            # Resume over HTTP, with an admin key: every transaction executed once.
            resumed = await http.patch(
                "/api/v1/admin/queues/normal",
                json={"state": "running"},
                headers={"X-API-Key": admin},
            )
            assert resumed.status_code == 200, resumed.text
            assert resumed.json()["lanes"][0]["state"] == "running"
        await _until(
            "every transaction confirmed",
            lambda: _statuses(database_url) == {"confirmed": QUEUED},
            180,
        )
        assert stub.ledger_count() == QUEUED
        view = _status(env)
        assert view["depths"]["dlq"]["visible"] == 0
        assert sum(c["received"] for c in view["consumers"]) >= QUEUED

        # Drain: the queued ones are finished, then the lane pauses by itself.
        relay_command(env, "queues", "pause", "--wait")
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{api_port}", timeout=30) as http:
            for i in range(20):
                response = await http.post(
                    "/api/v1/relay/direct",
                    json={"to": DEAD, "data": f"0x{QUEUED + i:08x}"},
                    headers={"X-API-Key": key},
                )
                assert response.status_code == 202, response.text
        await _until(
            "the outbox has sent the 20",
            lambda: _status(env)["depths"]["queue"]["visible"] == 20,
            30,
        )
        assert "lane normal: draining" in relay_command(env, "queues", "drain")
        await _until(
            "the drained lane pauses",
            lambda: _status(env)["lanes"][0]["state"] == "paused",
            60,
        )
        assert _status(env)["lanes"][0]["reason"] == "drained: the queue was empty"
        assert stub.ledger_count() == QUEUED + 20
    finally:
        for process in processes:
            stop_process(process)
        stub.stop()
    # Stopped consumers say so.
    assert {c["state"] for c in _status(env)["consumers"]} == {"stopped"}
