"""``relay db upgrade``, ``relay sweep --once``, ``relay reconcile --once``: the schema, and
one pass of the loops the services run by themselves (for a runbook's hand)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from relay_api.cli.common import out, with_settings
from relay_api.exitcodes import EXIT_OK

if TYPE_CHECKING:
    from relay_api.settings import ApiSettings


def add_parsers(sub: Any) -> None:
    db = sub.add_parser("db", help="database schema").add_subparsers(dest="action", required=True)
    db.add_parser("upgrade", help="apply migrations up to head").set_defaults(
        handler=with_settings(_upgrade)
    )
    sweep = sub.add_parser("sweep", help="send committed rows that never reached SQS")
    sweep.add_argument("--once", action="store_true", required=True, help="one pass, then exit")
    sweep.set_defaults(handler=with_settings(_sweep_once))
    reconcile = sub.add_parser(
        "reconcile", help="settle rows no other loop would look at again (docs/runbook.md)"
    )
    reconcile.add_argument("--once", action="store_true", required=True, help="one pass")
    reconcile.set_defaults(handler=with_settings(_reconcile_once))


async def _upgrade(settings: ApiSettings, args: argparse.Namespace) -> int:
    import asyncio

    from relay_api.provision import migrate

    # alembic runs its own event loop: not inside this one
    await asyncio.to_thread(migrate, settings.database_url)
    out("database at head")
    return EXIT_OK


async def _sweep_once(settings: ApiSettings, args: argparse.Namespace) -> int:
    from relay_api.outbox.service import sweep_until_idle
    from relay_api.runtime import open_runtime

    async with open_runtime(settings, background=False) as runtime:
        count = await sweep_until_idle(
            runtime.sessions,
            runtime.queue,
            grace_s=settings.outbox_sweep_grace_s,
            batch=settings.outbox_sweep_batch,
        )
    out(f"enqueued {count} transaction(s)")
    return EXIT_OK


async def _reconcile_once(settings: ApiSettings, args: argparse.Namespace) -> int:
    from relay_core import cache as cache_mod
    from relay_core import evm, queue
    from relay_core.db.engine import create_engine, create_sessionmaker
    from relay_core.reconcile import Reconciler
    from relay_core.relayers import ExecutorPool

    engine = create_engine(settings)
    redis = cache_mod.connect(settings.redis_url, 1.0) if settings.redis_url else None
    rpc = evm.EvmRpc(settings.chain_rpc_url) if settings.chain_rpc_url else None
    executors = ExecutorPool.configured(settings, timeout_s=settings.executor_timeout_s)
    try:
        async with queue.sqs_client(
            config=queue.client_config(settings), **queue.sqs_client_kwargs(settings)
        ) as sqs:
            lanes = await queue.lane_urls(sqs, settings)
            status_cache = cache_mod.StatusCache.configured(redis, settings)
            reconciler = Reconciler(
                create_sessionmaker(engine),
                sqs,
                lanes,
                settings,
                status_cache,
                executors=executors,
                rpc=rpc,
            )
            report = await reconciler.run_once()
    finally:
        if redis is not None:
            await redis.aclose()
        if rpc is not None:
            await rpc.aclose()
        await executors.aclose()
        await engine.dispose()
    out(
        f"examined {report.examined} row(s): {report.requeued} enqueued again, "
        f"{report.dead_lettered} failed as dead-lettered, "
        f"{report.lost_upstream} settled as lost by the executor"
    )
    for note in report.notes:
        out(f"note: {note}")
    return EXIT_OK
