"""Changes tried from outside, to measure a gain (or a cost) without editing services/ or libs/
(``python -m bench --experiment NAME[,NAME]``; benchmark launchers only).

Each experiment monkeypatches the launched API and consumer processes; results are labelled
with the experiments applied. The ones measured so far, and what they showed, are in
docs/performance.md ("Measured experiments").

- ``no_gc_freeze``: leave CPython's collector as it is (undo ``relay_core.gctuning``), to show
  what freezing the start-up objects buys;
- ``asyncio_consumer``: run the consumer on the standard asyncio loop instead of uvloop;
- ``young_gc_2000``: collect the young generation every 2,000 net allocations instead of
  20,000 (``relay_core.gctuning.YOUNG_THRESHOLD``): shorter collections, ten times as many;
- ``no_rate_limit``: the API without its rate limiter (every request allowed without asking
  Redis), to show what the guard's limiter costs per request;
- ``accept_on_connection``: the accept routes' unit of work on an ``AsyncConnection`` instead
  of an ``AsyncSession`` (what the session's own transaction bookkeeping costs per request;
  ``--only accept``: the status route would check out a connection it does not use).
- ``no_sqs_send``: the API's outbox "sends" without calling SQS (every message taken as sent,
  its row marked enqueued as usual), to show what the SQS calls cost the API per transaction;
  nothing reaches a queue, so only for the API's own scenarios (``--only batch``, ``accept``);
- ``stage_times``: no change, a measurement: how long a consumer's messages spend in each
  stage (waiting for room, the receive, the batch's row load, each status write, the executor
  call), written to the consumer's log as ``bench.stage_times`` when it stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

KNOWN = (
    "no_gc_freeze",
    "young_gc_2000",
    "asyncio_consumer",
    "accept_on_connection",
    "no_rate_limit",
    "stage_times",
    "no_sqs_send",
)


def enabled() -> set[str]:
    names = {n for n in os.environ.get("BENCH_EXPERIMENTS", "").split(",") if n}
    unknown = names - set(KNOWN)
    if unknown:
        raise SystemExit(f"unknown experiments {sorted(unknown)}; known: {', '.join(KNOWN)}")
    return names


def apply(names: set[str]) -> None:
    """Before the application is imported and started."""
    if "no_gc_freeze" in names:
        from relay_core import gctuning

        gctuning.freeze_after_startup = lambda: None
    if "young_gc_2000" in names:
        from relay_core import gctuning

        gctuning.YOUNG_THRESHOLD = 2_000
    if "asyncio_consumer" in names:
        from queue_consumer import main

        main._run_loop = asyncio.run
    if "no_rate_limit" in names:
        from relay_api.limits import service as limits

        async def allow(self: Any, subject: str, limit: Any) -> Any:
            return limits.Decision(True, limit, limit.burst, 0.0, 0.0)

        limits.RateLimiter.take = allow  # type: ignore[method-assign]
    if "no_sqs_send" in names:
        from relay_api.outbox.queue import WorkQueue

        async def sent(self: Any, messages: Any) -> set[str]:
            return {message.transaction_id for message in messages}

        WorkQueue.send = sent  # type: ignore[method-assign]
    if "accept_on_connection" in names:
        from relay_api import deps
        from relay_api.relay import endpoints

        original = deps.unit_of_work

        @contextlib.asynccontextmanager
        async def on_connection(runtime: Any) -> AsyncIterator[Any]:
            async with original(runtime) as uow:
                # execute / commit / rollback / close: what the accept path asks of a session
                uow._session = await runtime.engine.connect()
                yield uow

        endpoints.unit_of_work = on_connection  # type: ignore[assignment]
    if "stage_times" in names:
        _time_stages()


def _time_stages() -> None:
    import atexit
    import json
    import sys
    import time
    from collections import defaultdict

    from queue_consumer.lanes import Capacity
    from queue_consumer.stages.claiming import Claims
    from queue_consumer.transactions.group_commit import GroupCommit
    from queue_consumer.worker import Consumer
    from relay_core.executor import ExecutorClient
    from relay_wire.sqswire import SqsWire

    seen: dict[str, list[float]] = defaultdict(list)

    def timed(cls: Any, name: str, label: str) -> None:
        original = getattr(cls, name)

        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await original(*args, **kwargs)
            finally:
                seen[label].append(1000 * (time.perf_counter() - started))

        setattr(cls, name, wrapper)

    timed(Capacity, "reserve", "a message waiting for room")
    timed(SqsWire, "receive_message", "ReceiveMessage")
    timed(Claims, "load_many", "the batch's row load")
    timed(GroupCommit, "write", "a status write (queued, committed, cached)")
    timed(ExecutorClient, "submit", "the executor call")
    timed(Consumer, "_attempt", "the whole attempt (load to record)")

    def report() -> None:
        summary = {}
        for label, values in seen.items():
            values.sort()
            n = len(values)
            summary[label] = {
                "n": n,
                "p50_ms": round(values[n // 2], 1),
                "p90_ms": round(values[9 * n // 10], 1),
                "mean_ms": round(sum(values) / n, 1),
            }
        sys.stderr.write(json.dumps({"event": "bench.stage_times", **summary}) + "\n")

    atexit.register(report)
