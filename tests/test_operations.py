"""The operator's tools at scale on real processes (the API, two consumers, the relayer-stub,
SQS). Pause: a thousand queued transactions wait in SQS untouched (nothing received, nothing
dead-lettered, nothing executed) for the whole pause; resumed, every one is executed once.
Drain: what is queued is finished and the lane then pauses by itself. Redrive: two hundred
dead letters go back to the work queue and each transaction is executed exactly once."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from relay_core import queue as queue_mod
from relay_core.settings import InfraSettings
from relay_devstack.localsqs import free_port, stop_process
from relay_testkit import (
    Stub,
    infra_process_env,
    new_api_key,
    relay_command,
    start_stub,
    wait_http,
)

DEAD = "0x000000000000000000000000000000000000dEaD"
QUEUED = 1000
DEAD_LETTERS = 200
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


def _normal_states(view: dict[str, Any]) -> list[str]:
    """Each consumer's state in the normal lane (a consumer reports once per lane)."""
    return [c["state"] for c in view["consumers"] if c["lane"] == "normal"]


async def _until(what: str, check: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        await asyncio.sleep(0.5)


@dataclass
class Stack:
    env: dict[str, str]
    api_url: str
    key: str  # a busy client's
    admin: str
    stub: Stub
    database_url: str

    async def submit(self, count: int, first: int = 0) -> list[str]:
        async with httpx.AsyncClient(base_url=self.api_url, timeout=30) as http:
            limit = asyncio.Semaphore(20)

            async def one(i: int) -> str:
                async with limit:
                    response = await http.post(
                        "/api/v1/relay/direct",
                        json={"to": DEAD, "data": f"0x{i:08x}"},
                        headers={"X-API-Key": self.key},
                    )
                assert response.status_code == 202, response.text
                return str(response.json()["transactionId"])

            return list(await asyncio.gather(*(one(first + i) for i in range(count))))


@pytest.fixture
async def stack(infra_env: dict[str, Any], sqs: Any, tmp_path: Path) -> AsyncIterator[Stack]:
    """The API, two consumers (reading the switch every second) and the relayer-stub."""
    await queue_mod.create_queues(sqs, InfraSettings(**infra_env))
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
        api_url = f"http://127.0.0.1:{api_port}"
        wait_http(f"{api_url}/health", processes[0])
        await _until(
            "both consumers report running",
            lambda: _normal_states(_status(env)) == ["running"] * 2,
            60,
        )
        yield Stack(env, api_url, key, admin, stub, infra_env["database_url"])
    finally:
        for process in processes:
            stop_process(process)
        stub.stop()
    # Stopped consumers say so.
    assert {c["state"] for c in _status(env)["consumers"]} == {"stopped"}


@pytest.mark.ops
@pytest.mark.timeout(300)
async def test_pause_holds_a_thousand_messages_untouched_and_resume_drains_them(
    stack: Stack,
) -> None:
    env, stub, database_url = stack.env, stack.stub, stack.database_url
    # Pause, and wait until both consumers say they obey.
    paused = relay_command(env, "queues", "pause", "--reason", "maintenance", "--wait")
    assert "2 consumer(s) paused" in paused, paused

    await stack.submit(QUEUED)
    async with httpx.AsyncClient(base_url=stack.api_url, timeout=30) as http:
        # A client key may not switch lanes.
        refused = await http.patch(
            "/api/v1/admin/queues/normal",
            json={"state": "running"},
            headers={"X-API-Key": stack.key},
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
        assert _normal_states(view) == ["paused", "paused"]
        assert view["depths"]["queue"] == {"visible": QUEUED, "inFlight": 0, "delayed": 0}
        assert view["depths"]["dlq"]["visible"] == 0
        assert _statuses(database_url) == {"pending": QUEUED}
        assert stub.ledger_count() == 0

        # Resume over HTTP, with an admin key: every transaction executed once.
        resumed = await http.patch(
            "/api/v1/admin/queues/normal",
            json={"state": "running"},
            headers={"X-API-Key": stack.admin},
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
    await stack.submit(20, first=QUEUED)
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


@pytest.mark.ops
@pytest.mark.timeout(300)
async def test_a_redrive_of_two_hundred_dead_letters_executes_each_exactly_once(
    stack: Stack, sqs: Any, infra_env: dict[str, Any]
) -> None:
    env, stub, database_url = stack.env, stack.stub, stack.database_url
    relay_command(env, "queues", "pause", "--wait")
    ids = await stack.submit(DEAD_LETTERS)
    queue_url = (await sqs.get_queue_url(QueueName=infra_env["queue_name"]))["QueueUrl"]
    dlq_url = (await sqs.get_queue_url(QueueName=infra_env["dlq_name"]))["QueueUrl"]
    await _until(
        "the outbox has sent every message",
        lambda: _status(env)["depths"]["queue"]["visible"] == DEAD_LETTERS,
        30,
    )
    # As SQS's redrive policy would after consumers died on them: moved to the DLQ as they are.
    moved = 0
    while moved < DEAD_LETTERS:
        batch = (await sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10))["Messages"]
        for message in batch:
            await sqs.send_message(QueueUrl=dlq_url, MessageBody=message["Body"])
            await sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
        moved += len(batch)
    relay_command(env, "queues", "resume", "--wait")
    listed = json.loads(relay_command(env, "dlq", "list", "--limit", "1000", "--json"))
    assert sorted(m["transactionId"] for m in listed["messages"]) == sorted(ids)

    redrive = relay_command(env, "dlq", "redrive", "--all")
    assert "redriven 200, left 0" in redrive
    # One StartMessageMoveTask where the server has it (LocalStack, AWS), else one by one.
    on_localstack = os.environ.get("RELAY_LOCAL_SQS") == "localstack"
    assert ("(move task)" in redrive) == on_localstack, redrive
    await _until(
        "every redriven transaction confirmed",
        lambda: _statuses(database_url) == {"confirmed": DEAD_LETTERS},
        180,
    )
    assert stub.ledger_count() == DEAD_LETTERS  # each executed once
    view = _status(env)
    assert view["depths"]["dlq"] == {"visible": 0, "inFlight": 0, "delayed": 0}
    assert view["depths"]["queue"] == {"visible": 0, "inFlight": 0, "delayed": 0}
