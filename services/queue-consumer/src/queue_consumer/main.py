"""Entry point: ``queue-consumer`` runs the consumer; ``queue-consumer --check`` is the
container health probe (exit 0 when the process touched its heartbeat file recently)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import time
from collections.abc import AsyncIterator, Coroutine, Sequence
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from queue_consumer.circuit import CircuitBreaker, ExecutorGuard
from queue_consumer.notifications.service import Notifier
from queue_consumer.pool import Member, Pool
from queue_consumer.settings import ConsumerSettings
from queue_consumer.tracking.follow import Follower
from queue_consumer.tracking.receipts import FeeSettler
from queue_consumer.tracking.service import Tracker
from queue_consumer.transactions.group_commit import GroupCommit
from queue_consumer.transactions.lookup import ExecutorLookup
from queue_consumer.worker import Consumer, build
from relay_core import cache as cache_mod
from relay_core import evm, gctuning, jsonutil, tracing
from relay_core import queue as queue_mod
from relay_core.db.engine import create_engine, create_sessionmaker
from relay_core.logs import configure_logging
from relay_core.reconcile import Reconciler
from relay_core.relayers import ExecutorPool, RelayerSpec
from relay_wire.direct import DirectPool
from relay_wire.resp import RespClient

log = logging.getLogger("queue_consumer")


async def _queue_urls(
    sqs: Any, settings: ConsumerSettings, stop: asyncio.Event
) -> dict[str, tuple[str, str]]:
    """Each lane's (queue URL, DLQ URL). SQS may come up after us: keep asking until the
    queues exist."""
    while True:
        try:
            lanes = await queue_mod.lane_urls(sqs, settings)
            for queue_url, _ in lanes.values():
                await _check_redrive(sqs, queue_url, settings)
            return lanes
        except Exception as exc:
            log.warning("consumer.queue_unavailable", extra={"error": str(exc)})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 2.0)
            if stop.is_set():
                raise SystemExit(0) from exc


async def _check_redrive(sqs: Any, queue_url: str, settings: ConsumerSettings) -> None:
    """The consumer requeues a message on its last allowed receive, so it must know the
    queue's real maxReceiveCount: a smaller one than configured would dead-letter live
    transactions. The queue's own policy wins, loudly."""
    try:
        attributes = await sqs.get_queue_attributes(
            QueueUrl=queue_url, AttributeNames=["RedrivePolicy"]
        )
    except Exception as exc:  # not allowed to read it: go by the setting
        log.warning("consumer.redrive_unreadable", extra={"error": str(exc)})
        return
    policy = attributes.get("Attributes", {}).get("RedrivePolicy")
    if not policy:
        log.warning("consumer.queue_without_redrive", extra={"queue": settings.queue_name})
        return
    actual = int(jsonutil.loads(policy).get("maxReceiveCount", settings.queue_max_receive_count))
    if actual != settings.queue_max_receive_count:
        log.warning(
            "consumer.max_receive_count_differs",
            extra={"configured": settings.queue_max_receive_count, "queue": actual},
        )
        settings.queue_max_receive_count = actual


@contextlib.asynccontextmanager
async def _ops_server(consumer: Consumer, host: str, port: int) -> AsyncIterator[None]:
    """GET /health (the circuit, what is in flight; 503 while stopping) and GET /metrics
    (Prometheus) on ``host:port``; nothing when the port is 0."""
    if not port:
        yield
        return

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
            path = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b"/"
            if path.split(b"?", 1)[0] == b"/metrics":
                status, kind, body = b"200 OK", CONTENT_TYPE_LATEST.encode(), generate_latest()
            else:
                healthy = not consumer.stopping.is_set()
                body = jsonutil.dumps(
                    {
                        "status": "ok" if healthy else "stopping",
                        "circuit": consumer.breaker.describe(),
                        "databaseCircuit": consumer.database.describe(),
                        "executorInFlight": consumer.pool.in_flight,
                    }
                ).encode()
                status = b"200 OK" if healthy else b"503 Service Unavailable"
                kind = b"application/json"
            writer.write(
                b"HTTP/1.1 "
                + status
                + b"\r\ncontent-type: "
                + kind
                + b"\r\ncontent-length: "
                + str(len(body)).encode()
                + b"\r\nconnection: close\r\n\r\n"
                + body
            )
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, host, port)
    try:
        yield
    finally:
        server.close()
        await server.wait_closed()


def build_pool(
    settings: ConsumerSettings, executors: ExecutorPool, *, ordered_by_chain: bool
) -> Pool:
    """A member per relayer: its client, its own circuit, the in-flight limit of the executor
    instance serving it (shared by that instance's relayers), its in-doubt lookup."""
    limits: dict[str, asyncio.Semaphore] = {}

    def member(spec: RelayerSpec, guard: ExecutorGuard | None = None) -> Member:
        guard = guard or ExecutorGuard(
            CircuitBreaker(
                name=f"executor:{spec.id}",
                failure_threshold=settings.circuit_failure_threshold,
                cooldown_s=settings.circuit_cooldown_s,
                cooldown_cap_s=settings.circuit_cooldown_cap_s,
            ),
            settings.executor_max_in_flight,
            limits.setdefault(spec.url, asyncio.Semaphore(settings.executor_max_in_flight)),
        )
        client = executors.of(spec.id)
        lookup = ExecutorLookup(
            client,
            guard,
            page_size=settings.executor_list_page_size,
            max_pages=settings.consumer_lookup_max_pages,
            timeout_s=settings.executor_timeout_s,
            # leave the message's own timeout room to record what the lookup found
            deadline_s=max(5.0, settings.consumer_message_timeout_s - 15),
        )
        return Member(spec, client, guard, lookup)

    def retired(name: str) -> Member:
        """A relayer no longer in the pool, asked at the default's instance and circuit."""
        default = pool.members[pool.default]
        return member(RelayerSpec(name, default.spec.url, default.spec.api_key, 0), default.guard)

    pool = Pool(
        [member(spec) for spec in executors.specs.values()],
        executors.default,
        ordered_by_chain=ordered_by_chain,
        watch_interval_s=settings.relayer_watch_interval_s,
        retired=retired,
    )
    return pool


@contextlib.asynccontextmanager
async def open_consumer(
    settings: ConsumerSettings, stop: asyncio.Event | None = None
) -> AsyncIterator[Consumer]:
    """Build the consumer and everything it talks to; close it all on exit."""
    stop = stop or asyncio.Event()
    engine = create_engine(settings)
    executors = ExecutorPool.configured(
        settings,
        timeout_s=settings.executor_timeout_s,
        max_connections=settings.executor_max_in_flight,
    )
    rpc = evm.EvmRpc(settings.chain_rpc_url) if settings.chain_rpc_url else None
    pool = build_pool(settings, executors, ordered_by_chain=rpc is not None)
    redis = None
    cache = None
    if settings.redis_url:
        # The status cache's commands, its only use of Redis here (relay_wire.resp).
        redis = RespClient(settings.redis_url, settings.redis_timeout_s)
        cache = cache_mod.StatusCache(
            redis,
            settings.redis_prefix,
            terminal_ttl_s=settings.status_cache_terminal_ttl_s,
            active_ttl_s=settings.status_cache_active_ttl_s,
        )
    try:
        async with contextlib.AsyncExitStack() as stack:
            sqs = await stack.enter_async_context(
                queue_mod.sqs_client(
                    wire=settings.sqs_wire,
                    config=queue_mod.client_config(settings, timeout_s=5.0),
                    **queue_mod.sqs_client_kwargs(settings),
                )
            )
            lanes = await _queue_urls(sqs, settings, stop)
            sessions = create_sessionmaker(engine)
            direct = await stack.enter_async_context(DirectPool.opened(engine, settings))
            writes = GroupCommit(
                engine,
                cache,
                direct=direct,
                writers=settings.consumer_db_writers,
                max_batch=settings.consumer_write_batch,
            )
            follower = None
            if settings.tracker_enabled and settings.tracker_follow_interval_s > 0:
                follower = Follower(
                    sessions,
                    pool,
                    writes,
                    direct=direct,
                    interval_s=settings.tracker_follow_interval_s,
                    page_size=settings.tracker_follow_page_size,
                    max_pages=settings.tracker_follow_max_pages,
                    capacity=settings.tracker_follow_capacity,
                    max_age_s=settings.tracker_follow_max_age_s,
                    vouch_every_s=settings.tracker_stale_s / 2,
                )
            consumer = build(settings, sqs, lanes, sessions, pool, writes, rpc, follower)
            consumer.stopping = stop
            consumer.reconciler = Reconciler(
                sessions, sqs, lanes, settings, cache, executors=executors, rpc=rpc
            )
            consumer.fees = FeeSettler(sessions, rpc, cache, direct=direct)
            if settings.tracker_enabled:
                consumer.tracker = Tracker(
                    sessions,
                    pool,
                    writes,
                    direct=direct,
                    stale_after_s=settings.tracker_stale_s,
                    batch=settings.tracker_batch,
                    concurrency=settings.tracker_concurrency,
                    timeout_s=settings.executor_timeout_s,
                )
            if settings.notify_enabled:
                notifier = Notifier(
                    sessions,
                    timeout_s=settings.notify_timeout_s,
                    concurrency=settings.notify_concurrency,
                    max_age_s=settings.notify_max_age_s,
                    backoff_cap_s=settings.notify_backoff_cap_s,
                    policy=settings.callback_policy(),
                    per_client=settings.notify_per_client,
                    direct=direct,
                )
                consumer.notifier = notifier
                stack.push_async_callback(notifier.aclose)
            yield consumer
    finally:
        for member in (*pool.members.values(), *pool.retired.values()):
            await member.lookup.aclose()
        await executors.aclose()
        if rpc is not None:
            await rpc.aclose()
        if redis is not None:
            await redis.aclose()
        await engine.dispose()


async def run(settings: ConsumerSettings) -> dict[str, Any]:
    exporting = tracing.configure_export("queue-consumer")
    try:
        return await _run(settings)
    finally:
        if exporting:
            tracing.shutdown_export()


async def _run(settings: ConsumerSettings) -> dict[str, Any]:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with open_consumer(settings, stop) as consumer:
        gctuning.freeze_after_startup()
        log.info(
            "consumer.started",
            extra={
                "consumer": settings.consumer_id,
                "queues": {lane.name: lane.queue_url for lane in consumer.lanes},
                "concurrency": settings.consumer_concurrency,
                "pollers": settings.consumer_pollers,
            },
        )
        async with _ops_server(
            consumer, settings.consumer_health_host, settings.consumer_health_port
        ):
            return await consumer.run()


def check(settings: ConsumerSettings, max_age_s: float = 30.0) -> int:
    path = Path(settings.consumer_heartbeat_file)
    try:
        age = time.time() - path.stat().st_mtime
    except OSError:
        sys.stderr.write(f"no heartbeat file at {path}\n")
        return 1
    if age > max_age_s:
        sys.stderr.write(f"heartbeat is {age:.0f}s old\n")
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="queue-consumer", description="Relay SQS consumer")
    parser.add_argument("--check", action="store_true", help="health probe: exit 0 if alive")
    args = parser.parse_args(argv)
    settings = ConsumerSettings()
    if args.check:
        return check(settings)
    configure_logging(settings.log_level)
    settings.check_production_secrets()
    _run_loop(run(settings))
    return 0


def _run_loop(main: Coroutine[Any, Any, Any]) -> None:
    """On uvloop where it is installed (not on Windows), as the API runs under uvicorn."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)


if __name__ == "__main__":
    sys.exit(main())
