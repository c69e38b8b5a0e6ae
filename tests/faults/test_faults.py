"""The week's outages, each against the whole system on real processes running the shipped
defaults, judged from the executor's ledger and the database: 0 lost, 0 executed twice, 0
stuck, 0 failed for a cause that was only temporary, and the recovery time (from the end of
the fault to the last transaction decided) within a minute plus the backlog's drain time
(``make test-faults``; CI runs it as its own step).

Every scenario runs on the fast lane alone and on both lanes mixed; the executor's faults also
on the normal lane alone (invariant 9: no lane waits on another's traffic). Each keeps traffic
flowing through the outage, so the fault lands during consumption, and waits for every
transaction to be `confirmed` (the stub's lifecycle, followed by the consumers' tracker)
before it counts."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import httpx
import pytest
from consumer_testkit import set_rows, wait_until
from rig import (
    DEAD,
    SHAPES,
    Rig,
    feed,
    post_direct,
    seed,
    send_to_lanes,
    settle,
    tally,
)
from sqlalchemy.engine import make_url

from relay_core import queue as queue_mod
from relay_core.db.models import utcnow
from relay_core.settings import InfraSettings
from relay_devstack import localsqs
from relay_devstack.localsqs import free_port
from relay_testkit import STUB_DEV_KEY
from relay_testkit.tcpproxy import TcpProxy

pytestmark = [pytest.mark.faults, pytest.mark.timeout(900)]

SETTLE_S = 300  # after the outage, every transaction reaches its end well within this
EVERY_LANE = pytest.mark.parametrize("shape", SHAPES)
FAST_AND_MIXED = pytest.mark.parametrize("shape", ["fast", "mixed"])


def _unsent(database_url: str, count: int, shape: str) -> list[str]:
    """Committed rows whose messages are not sent yet (the feeder sends them)."""
    ids = seed(database_url, count, shape)
    set_rows(database_url, ids, enqueued_at=None)
    return ids


async def _judge(
    rig: Rig, scenario: str, shape: str, ids: list[str], started: float, ended: datetime
) -> None:
    await settle(rig.database_url, ids, SETTLE_S)
    counts = tally(f"{scenario} [{shape}]", rig.database_url, rig.stub, ids, ended)
    counts.seconds = time.monotonic() - started
    rig.record(counts)
    assert counts.clean, counts.line()


async def _through_an_outage(
    rig: Rig,
    sqs: Any,
    scenario: str,
    shape: str,
    begin: Callable[[], None],
    end: Callable[[], None],
    *,
    outage_s: float,
    lead_s: float = 10,
    rate: float = 10,
    packed: bool = False,
    **consumer_settings: Any,
) -> None:
    """500 transactions fed at ``rate`` per second through two consumers; the outage begins
    ``lead_s`` into the traffic and lasts ``outage_s``. ``packed``: each ten as a batch
    request's (one message per lane, relay_core.queue.pack)."""
    started = time.monotonic()
    ids = _unsent(rig.database_url, 500, shape)
    for n in range(2):
        rig.processes.consumer(f"consumer-{n}", **consumer_settings)
    traffic = asyncio.create_task(
        feed(sqs, rig.lanes, rig.database_url, ids, rate=rate, packed=packed)
    )
    await asyncio.sleep(lead_s)
    begin()
    await asyncio.sleep(outage_s)
    end()
    ended = utcnow()
    await traffic
    await _judge(rig, scenario, shape, ids, started, ended)


@EVERY_LANE
async def test_executor_refusing_connections_for_60_s(rig: Rig, sqs: Any, shape: str) -> None:
    # An executor restart: the process is gone, connections are refused; then it is back on
    # the same port with the same ledger.
    await _through_an_outage(
        rig,
        sqs,
        "executor refusing connections for 60 s",
        shape,
        rig.stub.kill,
        rig.stub.start,
        outage_s=60,
    )


@EVERY_LANE
async def test_executor_answering_429_for_60_s(rig: Rig, sqs: Any, shape: str) -> None:
    await _through_an_outage(
        rig,
        sqs,
        "executor answering 429 for 60 s",
        shape,
        lambda: rig.stub.faults(rate_limit_rate=1.0, rate_limit_after_s=2),
        rig.stub.faults,
        outage_s=60,
    )


@EVERY_LANE
async def test_executor_answering_429_for_60_s_to_a_batchs_packed_messages(
    rig: Rig, sqs: Any, shape: str
) -> None:
    # Each transaction of a packed message backs off on its own (a copy of its own message):
    # none waits for another's back-off, none is run twice.
    await _through_an_outage(
        rig,
        sqs,
        "executor answering 429 for 60 s, packed messages",
        shape,
        lambda: rig.stub.faults(rate_limit_rate=1.0, rate_limit_after_s=2),
        rig.stub.faults,
        outage_s=60,
        packed=True,
    )


@EVERY_LANE
async def test_executor_accepting_then_hanging(rig: Rig, sqs: Any, shape: str) -> None:
    # Every send is recorded and executed, but answered 20 s later: past the consumer's
    # timeout, so each attempt is in doubt and must be found, never sent again.
    await _through_an_outage(
        rig,
        sqs,
        "executor accepting then hanging",
        shape,
        lambda: rig.stub.faults(hang_rate=1.0, hang_s=20, scope="submit"),
        rig.stub.faults,
        lead_s=5,
        outage_s=30,
        rate=12,
    )


@FAST_AND_MIXED
async def test_mariadb_unreachable_for_30_s(rig: Rig, sqs: Any, shape: str) -> None:
    # A failover: every connection of the consumers reset, new ones refused.
    url = make_url(rig.database_url)
    with TcpProxy(url.port or 3306) as proxy:
        await _through_an_outage(
            rig,
            sqs,
            "MariaDB unreachable for 30 s",
            shape,
            proxy.cut,
            proxy.restore,
            outage_s=30,
            database_url=url.set(port=proxy.port).render_as_string(hide_password=False),
        )


@FAST_AND_MIXED
async def test_sqs_server_killed_and_restarted(rig: Rig, shape: str) -> None:
    """Through the API: the SQS server dies with the messages it held (an emulator keeps them
    in memory) and comes back empty; the outbox sends what the API could not, the consumers
    enqueue again what the dead server held (its queues are younger than those messages)."""
    started = time.monotonic()
    port = free_port()
    server = localsqs.start(port=port, log_path=rig.workdir / "sqs.log")
    env = {**rig.infra, "aws_endpoint_url": server.endpoint}
    settings = InfraSettings(**env)

    async def create_queues() -> None:
        async with queue_mod.sqs_client(
            config=queue_mod.client_config(settings), **queue_mod.sqs_client_kwargs(settings)
        ) as sqs:
            await queue_mod.create_queues(sqs, settings)

    try:
        await create_queues()
        rig.processes.env = env
        key = rig.processes.api_key()
        api_port = free_port()
        rig.processes.api("api", api_port)
        # Consumers slower than the traffic (a slow executor, few slots), so a backlog sits in
        # SQS when it dies: what makes this fault bite. No timing is shortened.
        rig.stub.faults(latency={"dist": "fixed", "ms": 500}, scope="submit")
        for n in range(2):
            rig.processes.consumer(f"consumer-{n}", consumer_concurrency=4)
        traffic = asyncio.create_task(
            post_direct(f"http://127.0.0.1:{api_port}", key, 500, rate=20, shape=shape)
        )
        await asyncio.sleep(8)
        server.kill()
        await asyncio.sleep(10)
        server = localsqs.start(port=port, log_path=rig.workdir / "sqs.log")
        await create_queues()  # the queues are infrastructure: they exist again
        ended = utcnow()
        ids, _ = await traffic
        rig.stub.faults()
        await _judge(rig, "SQS server killed and restarted", shape, ids, started, ended)
    finally:
        server.kill()


@FAST_AND_MIXED
async def test_api_sigkilled_under_load(rig: Rig, shape: str) -> None:
    started = time.monotonic()
    key = rig.processes.api_key()
    api_port = free_port()
    api = rig.processes.api("api", api_port)
    for n in range(2):
        rig.processes.consumer(f"consumer-{n}")
    traffic = asyncio.create_task(
        post_direct(f"http://127.0.0.1:{api_port}", key, 1000, rate=100, shape=shape)
    )
    await asyncio.sleep(4)
    api.send_signal(signal.SIGKILL)  # between commit and send, mid-request, mid-publish
    api.wait()
    await asyncio.sleep(1)  # down for a second: the traffic goes on, refused
    # Started off the event loop, so the traffic keeps arriving while the API boots.
    await asyncio.to_thread(rig.processes.api, "api-again", api_port)
    ended = utcnow()
    ids, unanswered = await traffic
    assert unanswered > 0, "the kill should have cut some requests off"
    assert len(ids) == 1000  # every request was answered 202 in the end (the same key)
    await _judge(rig, "API SIGKILLed under load", shape, ids, started, ended)


async def _consumer_killed_under_way(
    rig: Rig, sqs: Any, scenario: str, shape: str, *, packed: bool = False
) -> None:
    """1,000 transactions queued; the consumer working on them is SIGKILLed a third of the
    way through and two others take over."""
    started = time.monotonic()
    rig.stub.faults(latency={"dist": "uniform", "min_ms": 100, "max_ms": 400}, scope="submit")
    ids = seed(rig.database_url, 1000, shape)
    await send_to_lanes(sqs, rig.lanes, rig.database_url, ids, packed=packed)
    first = rig.processes.consumer("consumer-0")
    await wait_until(lambda: rig.stub.ledger_count() >= 300, 60, "the first consumer under way")
    first.send_signal(signal.SIGKILL)
    first.wait()
    rig.processes.consumer("consumer-1")
    rig.processes.consumer("consumer-2")
    ended = utcnow()
    await _judge(rig, scenario, shape, ids, started, ended)


@FAST_AND_MIXED
async def test_consumer_sigkilled_mid_batch(rig: Rig, sqs: Any, shape: str) -> None:
    await _consumer_killed_under_way(rig, sqs, "consumer SIGKILLed mid-batch", shape)


@FAST_AND_MIXED
async def test_consumer_sigkilled_amid_a_batchs_packed_messages(
    rig: Rig, sqs: Any, shape: str
) -> None:
    # Packed messages taken by the killed consumer come back whole after their visibility
    # timeout: what it had done is dropped by the rows' claims, the rest is done once.
    scenario = "consumer SIGKILLed amid packed messages"
    await _consumer_killed_under_way(rig, sqs, scenario, shape, packed=True)


@FAST_AND_MIXED
async def test_eight_thousand_executor_records_newer_than_the_in_doubt_ones(
    rig: Rig, sqs: Any, shape: str
) -> None:
    started = time.monotonic()
    ids = seed(rig.database_url, 500, shape)
    # Every send of these 500 is executed but never answered in time: all 500 in doubt.
    rig.stub.faults(hang_rate=1.0, hang_s=30, scope="submit")
    await send_to_lanes(sqs, rig.lanes, rig.database_url, ids)
    first = rig.processes.consumer("consumer-0")
    await wait_until(lambda: rig.stub.ledger_count() >= 500, 90, "all 500 sent and hung")
    first.send_signal(signal.SIGTERM)
    first.wait(150)
    rig.stub.faults()
    # Then 8,000 other transactions reach the executor, all newer than the 500.
    limit = asyncio.Semaphore(32)
    async with httpx.AsyncClient(
        base_url=rig.stub.base_url, headers={"Authorization": f"Bearer {STUB_DEV_KEY}"}
    ) as http:

        async def other(i: int) -> None:
            async with limit:
                response = await http.post(
                    "/api/v1/relayers/relayer-1/transactions",
                    json={"to": DEAD, "data": f"0xfeed{i:08x}", "value": "0", "speed": "fast"},
                )
                response.raise_for_status()

        await asyncio.gather(*(other(i) for i in range(8000)))
    assert rig.stub.ledger_count() == 8500
    for n in range(1, 3):
        rig.processes.consumer(f"consumer-{n}")
    ended = utcnow()
    await _judge(rig, "8,000 executor records newer than in-doubt ones", shape, ids, started, ended)
    assert rig.stub.ledger_count() == 8500  # none of the 500 was sent again
