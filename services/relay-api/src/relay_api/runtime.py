"""Long-lived clients of one API process, built in the lifespan and closed at shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from relay_api import metrics
from relay_api.auth.service import Authenticator, ensure_client_with_key
from relay_api.limits.budget import Budgets
from relay_api.limits.service import Limit, RateLimiter
from relay_api.outbox.publisher import Publisher
from relay_api.outbox.queue import WorkQueue
from relay_api.outbox.service import run_sweeper
from relay_api.relay.refresh import Refresher
from relay_api.settings import ApiSettings
from relay_api.webhooks import service as webhooks_service
from relay_api.webhooks.batch import WebhookWriter
from relay_core import cache as cache_mod
from relay_core import evm
from relay_core import queue as queue_mod
from relay_core.db.engine import create_engine, create_sessionmaker, fill_pool
from relay_core.fees import FeeOracle
from relay_core.relayers import ExecutorPool
from relay_core.tasks import cancel_all
from relay_wire.direct import DirectPool
from relay_wire.resp import RespClient

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    settings: ApiSettings
    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    queue: WorkQueue
    publisher: Publisher
    authenticator: Authenticator
    cache: cache_mod.StatusCache | None
    executors: ExecutorPool
    refresher: Refresher
    limiter: RateLimiter
    default_limit: Limit  # every client's, unless `relay clients policy` set its own
    budgets: Budgets
    redis: Any = None
    # The accept INSERT and the publisher's UPDATE past SQLAlchemy (MySQL; else None)
    direct: DirectPool | None = None
    # Executor webhooks applied in batches on ``direct`` (else one at a time, by the route)
    webhooks: WebhookWriter | None = None

    rpc: evm.EvmRpc | None = None  # the chain, when RELAY_CHAIN_RPC_URL is set
    fees: FeeOracle | None = None  # what a gas unit can cost at most (fee budgets)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


@contextlib.asynccontextmanager
async def open_runtime(settings: ApiSettings, *, background: bool = True) -> AsyncIterator[Runtime]:
    engine = create_engine(settings)
    sessions = create_sessionmaker(engine)
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(engine.dispose)
        direct = await stack.enter_async_context(DirectPool.opened(engine, settings))
        sqs = await stack.enter_async_context(
            queue_mod.sqs_client(
                wire=settings.sqs_wire,
                config=queue_mod.client_config(settings, timeout_s=settings.sqs_send_timeout_s),
                **queue_mod.sqs_client_kwargs(settings),
            )
        )
        work_queue = WorkQueue(
            sqs,
            {lane: settings.lane_queues(lane)[0] for lane in settings.lanes()},
            settings.sqs_send_timeout_s,
            packing=settings.outbox_pack,
        )
        redis = None
        status_cache = None
        if settings.redis_url:
            redis = cache_mod.connect(settings.redis_url, settings.redis_timeout_s)
            stack.push_async_callback(redis.aclose)
            # The status cache's commands on a connection of their own (relay_wire.resp);
            # the rate limiter and readiness stay on redis-py.
            cache_commands = RespClient(settings.redis_url, settings.redis_timeout_s)
            stack.push_async_callback(cache_commands.aclose)
            status_cache = cache_mod.StatusCache(
                cache_commands,
                settings.redis_prefix,
                terminal_ttl_s=settings.status_cache_terminal_ttl_s,
                active_ttl_s=settings.status_cache_active_ttl_s,
            )
        executors = ExecutorPool.configured(
            settings, timeout_s=max(settings.status_upstream_timeout_s, 1.0), max_connections=50
        )
        stack.push_async_callback(executors.aclose)
        refresher = Refresher(
            executors,
            sessions,
            status_cache,
            refresh_after_s=settings.status_refresh_after_s,
            timeout_s=settings.status_upstream_timeout_s,
        )
        publisher = Publisher(work_queue, sessions, direct)
        # Read at scrape time: nothing on the request path.
        metrics.OUTBOX_BACKLOG.set_function(publisher.backlog)
        metrics.OUTBOX_OLDEST_AGE.set_function(publisher.oldest_age_s)
        rpc = None
        if settings.chain_rpc_url:
            rpc = evm.EvmRpc(settings.chain_rpc_url, timeout_s=2.0)
            stack.push_async_callback(rpc.aclose)
        runtime = Runtime(
            settings=settings,
            engine=engine,
            sessions=sessions,
            queue=work_queue,
            publisher=publisher,
            authenticator=Authenticator(
                sessions, settings.auth_cache_ttl_s, unknown_ttl_s=settings.unknown_key_cache_s
            ),
            limiter=RateLimiter(redis, settings.redis_prefix),
            default_limit=Limit(settings.rate_limit_per_s, settings.rate_limit_burst),
            budgets=Budgets(sessions, settings.budget_lease_s),
            cache=status_cache,
            executors=executors,
            refresher=refresher,
            redis=redis,
            rpc=rpc,
            direct=direct,
            webhooks=WebhookWriter(direct, status_cache) if direct is not None else None,
            fees=FeeOracle(rpc, settings.max_fee_per_gas_wei),
        )
        # At shutdown, after the requests and before the engine: leases' rests go back.
        stack.push_async_callback(runtime.budgets.close)
        if settings.dev_api_key is not None:
            async with sessions() as session, session.begin():
                await ensure_client_with_key(
                    session, "dev", settings.dev_api_key.get_secret_value()
                )
        if background:
            warm = asyncio.create_task(
                fill_pool(engine, settings.database_pool_size), name="fill-pool"
            )
            stack.push_async_callback(_cancel, warm)
            publisher.start()
            stack.push_async_callback(publisher.stop)
            if runtime.webhooks is not None:
                runtime.webhooks.start()
                stack.push_async_callback(runtime.webhooks.stop)
            budgets = asyncio.create_task(runtime.budgets.run(), name="budget-leases")
            runtime.tasks.append(budgets)
            stack.push_async_callback(_cancel, budgets)
            pruning = asyncio.create_task(
                webhooks_service.prune(sessions, settings.webhook_receipt_retention_s),
                name="webhook-receipts",
            )
            runtime.tasks.append(pruning)
            stack.push_async_callback(_cancel, pruning)
            if settings.sweeper_enabled:
                task = asyncio.create_task(
                    run_sweeper(
                        sessions,
                        work_queue,
                        interval_s=settings.outbox_sweep_interval_s,
                        grace_s=settings.outbox_sweep_grace_s,
                        batch=settings.outbox_sweep_batch,
                        holding=publisher.oldest_unsent,
                    ),
                    name="outbox-sweeper",
                )
                runtime.tasks.append(task)
                stack.push_async_callback(_cancel, task)
        yield runtime


async def _cancel(task: asyncio.Task[Any]) -> None:
    await cancel_all([task])
    with contextlib.suppress(asyncio.CancelledError):
        await task
