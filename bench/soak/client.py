"""The soak's clients: a steady stream of direct transactions over both lanes, sent as a careful
client sends them (its own Idempotency-Key each, retried with it while the API does not answer
or answers 429/5xx), and a reader that follows a sample of them by their status. Both keep a
log of every answer, which the history checker reads.

They speak through ``relay_wire.http`` (tens of microseconds a request, where httpx costs a
millisecond): on a two-core machine the soak's own client must not take the CPU the system
under test needs."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

import orjson

from relay_wire import http

DEAD = "0x000000000000000000000000000000000000dEaD"
SPEEDS = ("fast", "average", "fastest", "safeLow")  # the fast lane, then the normal, in turn
WATCH_EVERY = 25  # one accepted transaction in this many is followed by its status


@dataclass
class Accepted:
    transaction_id: str
    data: str
    lane: str
    answered_at: datetime


@dataclass
class ClientLog:
    accepted: list[Accepted] = field(default_factory=list)
    unanswered: int = 0  # attempts that got no answer (retried with the same key)
    refused: dict[int, int] = field(default_factory=dict)  # retried answers by status
    abandoned: list[str] = field(default_factory=list)  # keys never answered 202
    # the status reader: (transaction id, status or "404", when read)
    reads: list[tuple[str, str, float]] = field(default_factory=list)
    nemesis_errors: list[str] = field(default_factory=list)  # faults that could not be made


async def send(api_url: str, key: str, rate: float, stop: asyncio.Event, log: ClientLog) -> None:
    """POST at ``rate`` per second until ``stop``; then wait for what is still being retried."""
    prefix = uuid.uuid4().hex[:6]
    client = http.HttpClient(api_url, max_connections=256, read_timeout_s=5)
    try:
        started = time.monotonic()
        pending: set[asyncio.Task[None]] = set()
        n = 0
        while not stop.is_set():
            await asyncio.sleep(max(0.0, started + n / rate - time.monotonic()))
            task = asyncio.create_task(_one(client, key, prefix, n, log))
            pending.add(task)
            task.add_done_callback(pending.discard)
            n += 1
        await asyncio.gather(*pending)
    finally:
        await client.aclose()


async def _one(client: http.HttpClient, key: str, prefix: str, n: int, log: ClientLog) -> None:
    speed = SPEEDS[n % len(SPEEDS)]
    data = f"0x{prefix}{n:010x}"
    body = orjson.dumps({"to": DEAD, "data": data, "value": "0", "speed": speed})
    headers = {
        "x-api-key": key,
        "idempotency-key": f"{prefix}-{n}",
        "content-type": "application/json",
    }
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            answer = await client.request(
                "POST", "/api/v1/relay/direct", headers=headers, body=body
            )
        except http.HttpError:
            log.unanswered += 1
            await asyncio.sleep(0.5)
            continue
        if answer.status == 202:
            lane = "fast" if speed in ("fast", "fastest") else "normal"
            tx_id = orjson.loads(answer.body)["transactionId"]
            log.accepted.append(Accepted(tx_id, data, lane, datetime.now(UTC)))
            return
        if answer.status in (429, 500, 502, 503, 504):
            log.refused[answer.status] = log.refused.get(answer.status, 0) + 1
            await asyncio.sleep(float(answer.headers.get("retry-after") or 0.5))
            continue
        raise AssertionError(f"{answer.status} {answer.body[:300]!r}")
    log.abandoned.append(headers["idempotency-key"])


async def read_statuses(api_url: str, key: str, stop: asyncio.Event, log: ClientLog) -> None:
    """Follow every WATCH_EVERY-th accepted transaction until it is final, once a second."""
    final = {"confirmed", "failed", "expired", "canceled"}
    done: set[str] = set()
    client = http.HttpClient(api_url, max_connections=32, read_timeout_s=5)

    async def read(tx_id: str) -> None:
        try:
            answer = await client.request(
                "GET", f"/api/v1/relay/status/{tx_id}", headers={"x-api-key": key}
            )
        except http.HttpError:
            return
        if answer.status == 200:
            status = orjson.loads(answer.body)["status"]
        elif answer.status == 404:
            status = "404"
        else:
            return  # the API down or busy: no read
        log.reads.append((tx_id, status, time.monotonic()))
        if status in final:
            done.add(tx_id)

    try:
        while not stop.is_set():
            watched = [
                a.transaction_id
                for a in log.accepted[::WATCH_EVERY]
                if a.transaction_id not in done
            ]
            await asyncio.gather(*(read(tx_id) for tx_id in watched))
            await asyncio.sleep(1)
    finally:
        await client.aclose()
