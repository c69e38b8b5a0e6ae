"""Which lane a submission takes: speed fast or fastest asked for goes to the fast lane's queue;
without speed, or slower, to the normal one; the sweeper keeps each row's lane."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from api_testkit import DEAD, receive_all
from sqlalchemy import select

from relay_api.outbox.service import sweep_until_idle
from relay_api.runtime import Runtime
from relay_core import jsonutil
from relay_core.db.models import Transaction


async def _fast_url(sqs: Any, runtime: Runtime) -> str:
    name, _ = runtime.settings.lane_queues("fast")
    return str((await sqs.get_queue_url(QueueName=name))["QueueUrl"])


def _ids(messages: list[Any]) -> set[str]:
    return {jsonutil.loads(m["Body"])["transactionId"] for m in messages}


async def _submit(client: httpx.AsyncClient, key: str, **fields: Any) -> str:
    answer = await client.post(
        "/api/v1/relay/direct", json={"to": DEAD, **fields}, headers={"X-API-Key": key}
    )
    assert answer.status_code == 202, answer.text
    return str(answer.json()["transactionId"])


async def test_speed_fast_or_fastest_takes_the_fast_lane(
    client: httpx.AsyncClient,
    runtime: Runtime,
    api_key: str,
    sqs: Any,
    queues: tuple[str, str],
) -> None:
    fast = {await _submit(client, api_key, speed=s) for s in ("fast", "fastest")}
    normal = {await _submit(client, api_key, speed=s) for s in ("safeLow", "average")}
    normal.add(await _submit(client, api_key))  # no speed: the normal lane
    assert _ids(await receive_all(sqs, await _fast_url(sqs, runtime))) == fast
    assert _ids(await receive_all(sqs, queues[0])) == normal
    async with runtime.sessions() as session:
        lanes = dict((await session.execute(select(Transaction.id, Transaction.lane))).all())
    assert {tx for tx, lane in lanes.items() if lane == "fast"} == fast


async def test_the_sweeper_sends_each_row_to_its_lane(
    client: httpx.AsyncClient,
    runtime: Runtime,
    api_key: str,
    sqs: Any,
    queues: tuple[str, str],
) -> None:
    await runtime.publisher.stop()  # the process "dies" after commit: nothing sent
    fast = await _submit(client, api_key, speed="fastest")
    normal = await _submit(client, api_key)
    sent = await sweep_until_idle(runtime.sessions, runtime.queue, grace_s=0, batch=100)
    assert sent == 2
    assert _ids(await receive_all(sqs, await _fast_url(sqs, runtime))) == {fast}
    assert _ids(await receive_all(sqs, queues[0])) == {normal}


@pytest.mark.parametrize("settings_overrides", [{"fast_lane": False}])
async def test_with_the_fast_lane_off_everything_takes_the_normal_lane(
    client: httpx.AsyncClient,
    api_key: str,
    sqs: Any,
    queues: tuple[str, str],
    settings_overrides: dict[str, Any],
) -> None:
    tx = await _submit(client, api_key, speed="fastest")
    assert _ids(await receive_all(sqs, queues[0])) == {tx}
