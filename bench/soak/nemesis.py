"""The nemesis: every one to three minutes it starts a fault, drawn without repeats until each
has had its turn (then the deck is shuffled again): the eight outages of the fault suite (the
executor refusing connections, answering 429, accepting then hanging; MariaDB unreachable; the
SQS server killed; the API and a consumer SIGKILLed; 8,000 executor records newer than
in-doubt ones), a lane paused and resumed, a consumer and the executor restarted. Each fault's
window (from its start to the moment it is over) is kept for the history checker."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

import orjson

from bench.soak.client import DEAD
from bench.soak.system import System
from relay_core.db.models import utcnow
from relay_testkit import STUB_DEV_KEY
from relay_wire import http

log = logging.getLogger("bench.soak")


@dataclass
class Window:
    fault: str
    start: datetime  # UTC, naive, as the database's clock
    end: datetime


Fault = Callable[[System], Awaitable[None]]


async def _executor_refusing(system: System) -> None:
    assert system.stub is not None
    await asyncio.to_thread(system.stub.kill)
    await asyncio.sleep(60)
    await asyncio.to_thread(system.stub.start)


async def _executor_429(system: System) -> None:
    assert system.stub is not None
    await asyncio.to_thread(system.stub.faults, rate_limit_rate=1.0, rate_limit_after_s=2)
    await asyncio.sleep(60)
    await asyncio.to_thread(system.stub.faults)


async def _executor_hanging(system: System) -> None:
    assert system.stub is not None
    await asyncio.to_thread(system.stub.faults, hang_rate=1.0, hang_s=20, scope="submit")
    await asyncio.sleep(30)
    await asyncio.to_thread(system.stub.faults)


async def _mariadb_unreachable(system: System) -> None:
    await asyncio.to_thread(system.proxy.cut)
    await asyncio.sleep(30)
    await asyncio.to_thread(system.proxy.restore)


async def _sqs_killed(system: System) -> None:
    await asyncio.to_thread(system.kill_sqs)
    await asyncio.sleep(10)
    await system.start_sqs()  # the queues are infrastructure: they exist again, empty


async def _api_killed(system: System) -> None:
    await asyncio.to_thread(system.kill_api)
    await asyncio.sleep(1)
    await asyncio.to_thread(system.start_api)


async def _consumer_killed(system: System) -> None:
    # consumer-0 lives through the whole soak (its memory is the one compared); the other
    # is the one the nemesis kills and restarts.
    await asyncio.to_thread(system.stop_consumer, "consumer-1", kill=True)
    await asyncio.sleep(2)
    system.start_consumer("consumer-1")


async def _newer_records(system: System) -> None:
    """In-doubt sends (accepted, never answered in time), then 8,000 other transactions at
    the executor, all newer: the in-doubt lookups must read past them."""
    assert system.stub is not None
    await asyncio.to_thread(system.stub.faults, hang_rate=1.0, hang_s=30, scope="submit")
    await asyncio.sleep(20)
    await asyncio.to_thread(system.stub.faults)
    client = http.HttpClient(system.stub.base_url, max_connections=16, read_timeout_s=30)
    headers = {"authorization": f"Bearer {STUB_DEV_KEY}", "content-type": "application/json"}
    prefix = uuid.uuid4().hex[:6]
    limit = asyncio.Semaphore(16)

    async def other(i: int) -> None:
        body = orjson.dumps(
            {"to": DEAD, "data": f"0xfeed{prefix}{i:08x}", "value": "0", "speed": "fast"}
        )
        async with limit:
            answer = await client.request(
                "POST", "/api/v1/relayers/relayer-1/transactions", headers=headers, body=body
            )
        if answer.status != 200:
            raise RuntimeError(f"the executor refused a send: {answer.status} {answer.body!r}")

    try:
        await asyncio.gather(*(other(i) for i in range(8000)))
    finally:
        await client.aclose()


async def _lane_paused(system: System) -> None:
    lane = random.choice(["normal", "fast"])
    await asyncio.to_thread(system.relay, "queues", "pause", "--lane", lane)
    await asyncio.sleep(30)
    await asyncio.to_thread(system.relay, "queues", "resume", "--lane", lane)


async def _consumer_restarted(system: System) -> None:
    await asyncio.to_thread(system.stop_consumer, "consumer-1", kill=False)
    system.start_consumer("consumer-1")


async def _executor_restarted(system: System) -> None:
    await asyncio.to_thread(system.restart_stub, kill=False)


FAULTS: dict[str, Fault] = {
    "executor refusing connections for 60 s": _executor_refusing,
    "executor answering 429 for 60 s": _executor_429,
    "executor accepting then hanging for 30 s": _executor_hanging,
    "MariaDB unreachable for 30 s": _mariadb_unreachable,
    "SQS server killed and restarted": _sqs_killed,
    "API SIGKILLed": _api_killed,
    "a consumer SIGKILLed": _consumer_killed,
    "8,000 executor records newer than in-doubt ones": _newer_records,
    "a lane paused for 30 s": _lane_paused,
    "a consumer restarted": _consumer_restarted,
    "the executor restarted": _executor_restarted,
}


async def run(
    system: System,
    stop: asyncio.Event,
    windows: list[Window],
    errors: list[str],
    rng: random.Random,
    *,
    first_after_s: float = 60,
    gap_s: tuple[float, float] = (60, 180),
) -> None:
    """Start a fault every ``gap_s`` (one to three minutes; the first after
    ``first_after_s``) until ``stop``; a fault under way when it is set runs to its end."""
    deck: list[str] = []
    next_at = time.monotonic() + first_after_s
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), max(0.0, next_at - time.monotonic()))
        if stop.is_set():
            return
        if not deck:
            deck = list(FAULTS)
            rng.shuffle(deck)
        name = deck.pop()
        began, start = time.monotonic(), utcnow()
        log.warning("soak.fault.start %s", name)
        try:
            await FAULTS[name](system)
        except Exception as exc:  # the nemesis's own failure: reported, and the soak unclean
            log.exception("soak.fault.failed %s", name)
            errors.append(f"{name}: {type(exc).__name__}: {exc}"[:300])
        windows.append(Window(name, start, utcnow()))
        log.warning("soak.fault.end %s (%.0f s)", name, time.monotonic() - began)
        next_at = began + rng.uniform(*gap_s)
