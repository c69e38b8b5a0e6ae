"""Everything one stub process holds, built in the lifespan and closed at shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from relayer_stub.faults.service import FaultInjector
from relayer_stub.ledger.repository import Ledger
from relayer_stub.lifecycle.service import Lifecycle
from relayer_stub.settings import StubSettings
from relayer_stub.transactions.service import TransactionService
from relayer_stub.transactions.store import TransactionStore
from relayer_stub.webhooks.service import WebhookDispatcher

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    settings: StubSettings
    ledger: Ledger
    store: TransactionStore
    faults: FaultInjector
    webhooks: WebhookDispatcher
    lifecycle: Lifecycle
    transactions: TransactionService

    async def reset(self) -> None:
        """Empty ledger and memory; faults, lifecycle and webhook back to the settings."""
        self.store.clear()
        self.lifecycle.reset()
        self.webhooks.clear()
        await self.ledger.reset()
        self.faults.configure(self.settings.faults)
        self.lifecycle.configure(self.settings.lifecycle)
        self.webhooks.configure(self.settings.webhook)
        log.info("stub.reset")


@contextlib.asynccontextmanager
async def open_runtime(settings: StubSettings) -> AsyncIterator[Runtime]:
    loop = asyncio.get_running_loop()
    # Chain mode: each relayer its own account (and serial sender); its address is `from`.
    signers = settings.chain_signers() if settings.chain_rpc_url is not None else {}
    relayers: dict[str, str] = {rid: str(signer.address) for rid, signer in signers.items()}
    relayers = relayers or settings.relayers
    ledger = Ledger(settings.ledger_path)
    loaded = await asyncio.to_thread(ledger.open)
    ledger.start(loop)
    store = TransactionStore(list(relayers))
    faults = FaultInjector(settings.faults)
    webhooks = WebhookDispatcher(
        settings.webhook,
        retries=settings.webhook_retries,
        backoff_min_s=settings.webhook_backoff_min_s,
        backoff_max_s=settings.webhook_backoff_max_s,
        timeout_s=settings.webhook_timeout_s,
        concurrency=settings.webhook_concurrency,
        queue_max=settings.webhook_queue_max,
    )
    common: dict[str, Any] = {
        "store": store,
        "ledger": ledger,
        "webhooks": webhooks,
        "base_gas_price_wei": settings.base_gas_price_wei,
        "retention_s": settings.retention_s,
        "maintenance_interval_s": settings.maintenance_interval_s,
        "persist_interval_s": settings.persist_interval_s,
        "faults": faults,
    }
    rpc = None
    lifecycle: Lifecycle
    if settings.chain_rpc_url is not None:
        from relayer_stub.chain.remote import RemoteRpc
        from relayer_stub.chain.service import ChainLifecycle

        rpc = RemoteRpc(settings.chain_rpc_url, latency_s=settings.chain_rpc_latency_ms / 1000)
        lifecycle = ChainLifecycle(
            settings.lifecycle,
            rpc=rpc,
            signers=signers,
            confirmations=settings.chain_confirmations,
            poll_interval_s=settings.chain_poll_interval_s,
            priority_fee_wei=settings.chain_priority_fee_wei,
            **common,
        )
    else:
        lifecycle = Lifecycle(settings.lifecycle, **common)
    runtime = Runtime(
        settings=settings,
        ledger=ledger,
        store=store,
        faults=faults,
        webhooks=webhooks,
        lifecycle=lifecycle,
        transactions=TransactionService(
            relayers=relayers, store=store, ledger=ledger, lifecycle=lifecycle, faults=faults
        ),
    )
    await webhooks.start()
    lifecycle.start(loop)
    restored = lifecycle.restore(loaded.states, loaded.next_nonces)
    log.info(
        "stub.started",
        extra={
            "ledger": settings.ledger_path,
            "ledger_entries": loaded.total,
            "restored": restored,
            "relayers": relayers,
            "webhook": settings.webhook_url is not None,
            "chain": settings.chain_rpc_url,
        },
    )
    try:
        yield runtime
    finally:
        await lifecycle.stop()
        if rpc is not None:
            await rpc.aclose()
        await webhooks.stop()
        await ledger.close()
        log.info("stub.stopped", extra={"live_transactions": len(store)})
