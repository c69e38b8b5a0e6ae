"""The consumer's background jobs, beside the message path: the reaper of stale claims, the
reconciler's passes, the circuits' own probes, the heartbeat file and log line, and a loop that
runs a job every interval (the tracker, the fee settler, the reconciler)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from queue_consumer.circuit import Circuit, ExecutorGuard
from queue_consumer.lanes import Lane
from queue_consumer.stages.claiming import Claims
from relay_core.executor import ExecutorClient
from relay_core.reconcile import Reconciler

log = logging.getLogger(__name__)


def executor_probe(guard: ExecutorGuard, executor: ExecutorClient) -> Callable[[], Awaitable[Any]]:
    """The consumer's own half-open probe of the executor: the relayer's status."""
    return lambda: guard.within_limit(executor.probe())


def database_probe(sessions: async_sessionmaker[AsyncSession]) -> Callable[[], Awaitable[None]]:
    async def probe() -> None:
        async with sessions() as session:
            await session.execute(text("SELECT 1"))

    return probe


async def every(
    interval_s: float,
    job: Callable[[], Awaitable[int]],
    name: str,
    counts: Counter[str],
    *,
    full: int = 1,
) -> None:
    """Run ``job`` again at once while it does ``full`` or more (a whole batch: more may be
    waiting), else after ``interval_s``. A pass that finds a little work each time is not run
    again at once: under a steady trickle it would run a pass per row, each paying its
    queries in full (the receipt pass did, at a chain's rate)."""
    while True:
        try:
            done = await job()
            counts[f"{name}_done"] += done
        except Exception as exc:
            log.warning(f"consumer.{name}.failed", extra={"error": str(exc)})
            done = 0
        if done < full:
            await asyncio.sleep(interval_s)


async def reaper(claims: Claims, interval_s: float, counts: Counter[str]) -> None:
    while True:
        await asyncio.sleep(interval_s)
        try:
            counts["reaped"] += await claims.reap_stale()
        except Exception as exc:
            log.warning("consumer.reaper.failed", extra={"error": str(exc)})


async def reconcile(
    reconciler: Reconciler | None,
    lanes: Sequence[Lane],
    circuits: Sequence[Circuit],
    counts: Counter[str],
) -> int:
    """One reconciler pass, unless a circuit is open or a lane is paused: then messages wait in
    SQS on purpose and their rows only look stranded."""
    paused = any(not lane.receiving.is_set() for lane in lanes)
    outage = not all(circuit.closed for circuit in circuits)
    if reconciler is None or outage or paused:
        return 0
    report = await reconciler.run_once()
    counts["requeued_by_reconciler"] += report.requeued
    counts["dead_lettered_by_reconciler"] += report.dead_lettered
    counts["lost_upstream"] += report.lost_upstream
    return 0  # then wait the interval: a pass settles its whole batch


async def requeue_lost(reconciler: Reconciler, counts: Counter[str]) -> None:
    """SQS answers again after failing: if it came back without the queue's messages (a queue
    made again, a local server restarted empty), their rows are enqueued again now rather than
    at the next reconciler pass (relay_core.reconcile)."""
    try:
        report = await reconciler.requeue_lost()
        counts["requeued_by_reconciler"] += report.requeued
    except Exception as exc:
        log.warning("consumer.requeue_lost_failed", extra={"error": str(exc)[:200]})


async def heartbeat_file(path: str | Path, describe: Callable[[], dict[str, Any]]) -> None:
    """Every 5 s the heartbeat file (``queue-consumer --check``); every 30 s a
    ``consumer.heartbeat`` log line (``describe()``), which infra/ turns into CloudWatch
    metrics (a consumer gone quiet, a circuit open for long) by metric filters on the log
    group."""
    beats = 0
    while True:
        with contextlib.suppress(OSError):
            await asyncio.to_thread(Path(path).write_text, f"{time.time():.0f}\n")
        if beats % 6 == 0:
            log.info("consumer.heartbeat", extra=describe())
        beats += 1
        await asyncio.sleep(5)
