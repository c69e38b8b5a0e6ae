"""Row-as-outbox: whatever happens to the SQS send, every committed row is enqueued."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
from api_testkit import DEAD, receive_all
from sqlalchemy import select

from relay_api.app import create_app
from relay_api.outbox.service import sweep_until_idle
from relay_api.runtime import Runtime
from relay_core import jsonutil
from relay_core import queue as queue_mod
from relay_core.db.models import Transaction
from relay_devstack import localsqs


async def _enqueued_at(runtime: Runtime, tx_id: str) -> Any:
    async with runtime.sessions() as session:
        return (
            await session.execute(select(Transaction.enqueued_at).where(Transaction.id == tx_id))
        ).scalar_one()


def _ids(messages: list[Any]) -> list[str]:
    return [jsonutil.loads(m["Body"])["transactionId"] for m in messages]


async def test_send_lost_after_commit_is_enqueued_exactly_once_by_the_sweeper(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str, sqs: Any, queues: tuple[str, str]
) -> None:
    # The process "dies" between commit and send: the publisher never runs.
    await runtime.publisher.stop()
    response = await client.post(
        "/api/v1/relay/direct", json={"to": DEAD}, headers={"X-API-Key": api_key}
    )
    assert response.status_code == 202
    tx_id = response.json()["transactionId"]
    assert await _enqueued_at(runtime, tx_id) is None
    assert runtime.publisher.oldest_unsent() is None  # a stopped publisher holds nothing back
    assert (await sqs.receive_message(QueueUrl=queues[0], WaitTimeSeconds=0)).get(
        "Messages"
    ) is None

    sweep = {"grace_s": 0, "batch": 100}
    assert await sweep_until_idle(runtime.sessions, runtime.queue, **sweep) == 1
    assert await sweep_until_idle(runtime.sessions, runtime.queue, **sweep) == 0
    assert await _enqueued_at(runtime, tx_id) is not None
    assert _ids(await receive_all(sqs, queues[0])) == [tx_id]


async def test_sweeper_leaves_rows_younger_than_the_grace_period_to_the_publisher(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str
) -> None:
    await runtime.publisher.stop()
    response = await client.post(
        "/api/v1/relay/direct", json={"to": DEAD}, headers={"X-API-Key": api_key}
    )
    assert response.status_code == 202
    assert await sweep_until_idle(runtime.sessions, runtime.queue, grace_s=60, batch=10) == 0
    assert await sweep_until_idle(runtime.sessions, runtime.queue, grace_s=0, batch=10) == 1


class _StuckQueue:
    """SQS that accepts nothing until ``gate`` opens (a slow send behind an overload)."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.gate = asyncio.Event()

    async def send(self, messages: Any) -> Any:
        await self.gate.wait()
        return await self.real.send(messages)


async def test_sweeper_does_not_resend_what_a_backlogged_publisher_still_holds(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str, sqs: Any, queues: tuple[str, str]
) -> None:
    stuck = _StuckQueue(runtime.queue)
    runtime.publisher._queue = stuck  # type: ignore[assignment]
    response = await client.post(
        "/api/v1/relay/direct", json={"to": DEAD}, headers={"X-API-Key": api_key}
    )
    tx_id = response.json()["transactionId"]
    await asyncio.sleep(1.5)  # older than the grace period, still in the publisher
    sweep = {"grace_s": 1.0, "batch": 10}
    held = runtime.publisher.oldest_unsent
    assert held() is not None
    assert await sweep_until_idle(runtime.sessions, runtime.queue, **sweep, holding=held) == 0
    stuck.gate.set()
    for _ in range(100):
        if await _enqueued_at(runtime, tx_id) is not None:
            break
        await asyncio.sleep(0.05)
    assert held() is None
    assert _ids(await receive_all(sqs, queues[0])) == [tx_id]  # sent once, by the publisher
    # Without the publisher's word the same row would have been sent a second time:
    stuck_again = _StuckQueue(runtime.queue)
    runtime.publisher._queue = stuck_again  # type: ignore[assignment]
    again = await client.post(
        "/api/v1/relay/direct", json={"to": DEAD, "value": "1"}, headers={"X-API-Key": api_key}
    )
    await asyncio.sleep(1.5)
    assert await sweep_until_idle(runtime.sessions, runtime.queue, **sweep) == 1
    assert _ids(await receive_all(sqs, queues[0])) == [again.json()["transactionId"]]
    stuck_again.gate.set()


async def test_sweeper_sends_in_batches_until_the_backlog_is_gone(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str, sqs: Any, queues: tuple[str, str]
) -> None:
    await runtime.publisher.stop()
    accepted = await asyncio.gather(
        *(
            client.post(
                "/api/v1/relay/direct",
                json={"to": DEAD, "value": str(i)},
                headers={"X-API-Key": api_key},
            )
            for i in range(25)
        )
    )
    ids = {r.json()["transactionId"] for r in accepted}
    assert await sweep_until_idle(runtime.sessions, runtime.queue, grace_s=0, batch=7) == 25
    assert sorted(_ids(await receive_all(sqs, queues[0]))) == sorted(ids)


async def test_sqs_down_at_accept_still_202_and_the_message_arrives_when_sqs_returns(
    api_settings: Any, api_key: str
) -> None:
    server = localsqs.start()
    port = server.port
    settings = api_settings.model_copy(
        update={
            "aws_endpoint_url": server.endpoint,
            "sweeper_enabled": True,
            "outbox_sweep_interval_s": 0.2,
            "outbox_sweep_grace_s": 0.5,
            "sqs_send_timeout_s": 1.0,
        }
    )
    client_kwargs = queue_mod.sqs_client_kwargs(settings)
    async with queue_mod.sqs_client(**client_kwargs) as sqs:
        await queue_mod.create_queues(sqs, settings)
    app = create_app(settings)
    try:
        async with app.router.lifespan_context(app):
            runtime: Runtime = app.state.runtime
            server.kill()  # SQS goes away
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://relay.test"
            ) as client:
                started = time.monotonic()
                response = await client.post(
                    "/api/v1/relay/direct", json={"to": DEAD}, headers={"X-API-Key": api_key}
                )
                assert response.status_code == 202
                assert time.monotonic() - started < 1.0  # the send is off the request path
                tx_id = response.json()["transactionId"]
                await asyncio.sleep(1.5)  # publisher and sweeper both fail meanwhile
                assert await _enqueued_at(runtime, tx_id) is None
                ready = await client.get("/ready")
                assert ready.status_code == 503
                assert ready.json()["components"]["sqs"].startswith("down")

                server = localsqs.start(port=port)  # SQS is back (an emulator restarts empty)
                async with queue_mod.sqs_client(**client_kwargs) as sqs:
                    queue_url, _ = await queue_mod.create_queues(sqs, settings)
                    deadline = time.monotonic() + 20
                    while await _enqueued_at(runtime, tx_id) is None:
                        assert time.monotonic() < deadline, "sweeper did not catch up"
                        await asyncio.sleep(0.2)
                    assert _ids(await receive_all(sqs, queue_url)) == [tx_id]
    finally:
        server.stop()


async def test_cli_sweep_once_enqueues_what_the_api_never_sent(
    client: httpx.AsyncClient,
    runtime: Runtime,
    api_key: str,
    sqs: Any,
    queues: tuple[str, str],
    database_url: str,
) -> None:
    import os
    import subprocess
    import sys

    await runtime.publisher.stop()
    response = await client.post(
        "/api/v1/relay/direct", json={"to": DEAD}, headers={"X-API-Key": api_key}
    )
    settings = runtime.settings
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "AWS_ENDPOINT_URL": settings.aws_endpoint_url or "",
        "RELAY_QUEUE_NAME": settings.queue_name,
        "RELAY_DLQ_NAME": settings.dlq_name,
        "RELAY_OUTBOX_SWEEP_GRACE_S": "0",
    }
    result = subprocess.run(
        [sys.executable, "-m", "relay_api.cli", "sweep", "--once"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout.strip().splitlines()[-1] == "enqueued 1 transaction(s)"
    assert _ids(await receive_all(sqs, queues[0])) == [response.json()["transactionId"]]
