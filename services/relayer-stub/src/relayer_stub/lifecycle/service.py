"""Walks every accepted transaction through upstream's EVM statuses on a timer.

pending -> sent (nonce, price, signature and hash) -> submitted (``sent_at``) -> mined ->
confirmed, or -> failed from submitted (a revert, forced by ``fail_to`` /
``fail_data_marker`` or drawn with ``failure_rate``). ``valid_until`` passing while sent or
submitted replaces the transaction with a no-op (to = from, value 0, data ``0x``, new hash,
status_reason "Transaction is expired. Replacing with NOOP.") that ends ``confirmed``; passing
while pending fails it. A cancel while pending is final at once; while sent or submitted it
becomes a no-op with ``is_canceled`` and ends ``canceled``. A replace takes new terms (to,
value, data, gas limit, speed) and, once signed, a new hash; its timers carry on. Final
transactions are deleted after the retention period. Every change is sent as a webhook and
written to the ledger (batched: one write per transaction per ``persist_interval_s``). A
jammed relayer's (fault ``jam_relayers``) transactions advance to submitted and wait there
until it is lifted.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import random
import time
from collections import Counter
from typing import Any

import orjson

from relayer_stub.faults.service import FaultInjector
from relayer_stub.ledger.repository import Ledger
from relayer_stub.lifecycle.pricing import fallback_gas_limit, replacement_gas_price, speed_price
from relayer_stub.lifecycle.replacement import (
    ensure_changeable,
    ensure_replaceable,
    replacement_speed,
    take_terms,
)
from relayer_stub.lifecycle.schemas import LifecycleConfig
from relayer_stub.transactions.models import Status, Transaction, now_rfc3339, random_hex
from relayer_stub.transactions.schemas import SendRequest, signing_problem
from relayer_stub.transactions.store import TransactionStore
from relayer_stub.webhooks.service import WebhookDispatcher

log = logging.getLogger(__name__)

EXPIRED_NOOP_REASON = "Transaction is expired. Replacing with NOOP."
EXPIRED_PENDING_REASON = "Transaction is expired: valid_until passed before it was sent"
NOOP_GAS_LIMIT = 21_000
DEFAULT_BALANCE_WEI = 10**21  # memory mode: every relayer's balance unless a fault sets it
_NEXT_DELAY = {
    Status.pending: "delay_sent_ms",
    Status.sent: "delay_submitted_ms",
    Status.submitted: "delay_mined_ms",
    Status.mined: "delay_confirmed_ms",
}


class Lifecycle:
    def __init__(
        self,
        config: LifecycleConfig,
        *,
        store: TransactionStore,
        ledger: Ledger,
        webhooks: WebhookDispatcher,
        base_gas_price_wei: int,
        retention_s: float,
        maintenance_interval_s: float,
        persist_interval_s: float,
        faults: FaultInjector,
    ) -> None:
        self._config = config.model_copy(deep=True)
        self._faults = faults
        faults.on_configure(self._faults_changed)  # a jam lifted: its transactions go on
        self._rng = random.Random(config.seed)
        self._store = store
        self._ledger = ledger
        self._webhooks = webhooks
        self._base_gas_price = base_gas_price_wei
        self.retention_s = retention_s
        self._maintenance_interval_s = maintenance_interval_s
        self._persist_interval_s = persist_interval_s
        self._dirty: dict[str, Transaction] = {}
        self._nonces: dict[str, int] = {}
        self._parked: set[str] = set()
        self._retention: list[tuple[float, str]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._maintenance: asyncio.Task[None] | None = None
        self._flusher: asyncio.Task[None] | None = None
        self.transitions: Counter[str] = Counter()
        self.purged = 0

    # -- configuration ---------------------------------------------------------------------

    @property
    def config(self) -> LifecycleConfig:
        return self._config.model_copy(deep=True)

    def configure(self, config: LifecycleConfig) -> None:
        self._config = config.model_copy(deep=True)
        self._rng = random.Random(config.seed)
        self._release_parked()

    def _faults_changed(self) -> None:
        self._release_parked()

    def next_nonce(self, relayer_id: str) -> int:
        return self._nonces.get(relayer_id, 0)

    async def balance(self, relayer_id: str) -> int:
        """The relayer's balance in wei (memory mode: a fixed, ample amount)."""
        return DEFAULT_BALANCE_WEI

    def stats(self) -> dict[str, Any]:
        return {
            "live": len(self._store),
            "parked": len(self._parked),
            "purged": self.purged,
            "transitions": {str(status): n for status, n in self.transitions.items()},
            "next_nonces": dict(self._nonces),
        }

    # -- start-up, shutdown, reset -----------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._maintenance = loop.create_task(self._maintain(), name="lifecycle-maintenance")
        self._flusher = loop.create_task(self._flush_periodically(), name="lifecycle-flush")

    async def stop(self) -> None:
        for task in (self._maintenance, self._flusher):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._maintenance = self._flusher = None
        self.flush()

    def restore(self, states: list[dict[str, Any]], next_nonces: dict[str, int]) -> int:
        """Reload live transactions from the ledger and carry on where they stopped."""
        self._nonces.update(next_nonces)
        for state in states:
            tx = Transaction.from_state(state)
            self._store.add(tx)
            if tx.is_final:
                if tx.delete_at_ts is not None:
                    heapq.heappush(self._retention, (tx.delete_at_ts, tx.id))
            else:
                self.track(tx)
        return len(states)

    def reset(self) -> None:
        self._dirty.clear()
        self._parked.clear()
        self._retention.clear()
        self._nonces.clear()
        self.transitions = Counter()
        self.purged = 0

    # -- the API's entry points ---------------------------------------------------------------

    def admit(self, tx: Transaction) -> None:
        """Decide up front (and persist) whether a new transaction will revert."""
        config = self._config
        forced = (tx.to is not None and tx.to.lower() in config.fail_to) or (
            config.fail_data_marker is not None
            and config.fail_data_marker in (tx.data or "").lower()
        )
        tx.will_fail = forced or (
            config.failure_rate > 0 and self._rng.random() < config.failure_rate
        )

    def track(self, tx: Transaction) -> None:
        """Schedule the next step for a transaction that is not final."""
        delay_field = _NEXT_DELAY.get(tx.status)
        if delay_field is not None:
            self._schedule(tx, getattr(self._config, delay_field))

    def cancel(self, tx: Transaction) -> None:
        ensure_changeable(tx, "cancel_transaction")
        if tx.status is Status.pending:
            self._finish(tx, Status.canceled, None)
        elif not tx.is_canceled:
            self._replace_with_noop(tx, reason=None, canceled=True)
            self._changed(tx)
        log.info("stub.tx.canceled", extra={"transaction_id": tx.id, "status": str(tx.status)})

    def expire(self, tx: Transaction) -> None:
        """valid_until passes now (admin, on demand): upstream's expiry path at once."""
        ensure_changeable(tx, "expiry")
        tx.valid_until_ts = min(tx.valid_until_ts, time.time())
        if tx.status is Status.pending:
            self._finish(tx, Status.failed, EXPIRED_PENDING_REASON)
        elif not tx.is_noop:
            self._replace_with_noop(tx, reason=EXPIRED_NOOP_REASON, canceled=False)
            self._changed(tx)
        else:
            self._persist(tx)

    async def replace(self, tx: Transaction, request: SendRequest) -> None:
        """Upstream's replace: the same id and nonce, the request's terms, priced again from
        the speed (at least an outbid of the price it had). Signed already (sent, submitted):
        signed again, a new hash. Nothing is rescheduled: it goes on where its timers are, and
        a hold or a jam that holds it still does."""
        ensure_replaceable(tx, request)
        market = speed_price(self._base_gas_price, replacement_speed(tx, request))
        gas_price = replacement_gas_price(tx, market)  # before the old price is cleared
        take_terms(tx, request)
        self.admit(tx)  # failure is decided by the terms, and these are new
        if tx.status is not Status.pending:
            tx.gas_price = gas_price
            self._sign(tx)
            if tx.status is Status.submitted:
                tx.sent_at = now_rfc3339()
        self._changed(tx)
        log.info("stub.tx.replaced", extra={"transaction_id": tx.id, "status": str(tx.status)})

    # -- the state machine ---------------------------------------------------------------------

    def _schedule(self, tx: Transaction, delay_ms: float) -> None:
        assert self._loop is not None, "Lifecycle.start() first"
        tx.version += 1
        self._loop.call_later(delay_ms / 1000.0, self._step, tx.id, tx.version)

    def _holds(self, tx: Transaction) -> bool:
        jammed = tx.status is Status.submitted and self._faults.jammed(tx.relayer_id)
        return self._config.paused or tx.status.value == self._config.hold_at or jammed

    def _step(self, tx_id: str, version: int) -> None:
        tx = self._store.get(tx_id)
        if tx is None or tx.version != version or tx.is_final:
            return
        if self._holds(tx):
            self._parked.add(tx_id)
            return
        try:
            self._advance(tx)
        except Exception:
            log.exception("stub.lifecycle.step_failed", extra={"transaction_id": tx_id})

    def _release_parked(self) -> None:
        for tx_id in list(self._parked):
            tx = self._store.get(tx_id)
            if tx is None or tx.is_final:
                self._parked.discard(tx_id)
            elif not self._holds(tx):
                self._parked.discard(tx_id)
                self._schedule(tx, 0)

    def _expired(self, tx: Transaction) -> bool:
        return time.time() >= tx.valid_until_ts

    def _advance(self, tx: Transaction) -> None:
        config = self._config
        if tx.status is Status.pending:
            if self._expired(tx):
                self._finish(tx, Status.failed, EXPIRED_PENDING_REASON)
                return
            problem = signing_problem(tx.to, tx.data)
            if problem is not None:
                self._finish(tx, Status.failed, problem)
                return
            self._prepare(tx)
            self._changed(tx)
            self._schedule(tx, config.delay_submitted_ms)
        elif tx.status is Status.sent:
            if self._expired(tx) and not tx.is_noop:
                self._replace_with_noop(tx, reason=EXPIRED_NOOP_REASON, canceled=False)
                self._changed(tx)
            tx.status = Status.submitted
            tx.sent_at = now_rfc3339()
            self._changed(tx)
            self._schedule(tx, config.delay_mined_ms)
        elif tx.status is Status.submitted:
            if self._expired(tx) and not tx.is_noop:
                self._replace_with_noop(tx, reason=EXPIRED_NOOP_REASON, canceled=False)
                self._changed(tx)
                self._schedule(tx, config.delay_mined_ms)
            elif tx.will_fail and not tx.is_noop:
                self._finish(tx, Status.failed, config.failure_reason)
            else:
                tx.status = Status.mined
                self._changed(tx)
                self._schedule(tx, config.delay_confirmed_ms)
        elif tx.status is Status.mined:
            tx.confirmed_at = now_rfc3339()
            self._finish(tx, Status.canceled if tx.is_canceled else Status.confirmed, None)

    def _prepare(self, tx: Transaction) -> None:
        nonce = self._nonces.get(tx.relayer_id, 0)
        self._nonces[tx.relayer_id] = nonce + 1
        tx.nonce = nonce
        if tx.speed is not None:
            tx.gas_price = speed_price(self._base_gas_price, tx.speed)
        if tx.gas_limit is None:
            tx.gas_limit = fallback_gas_limit(tx.data)
        self._sign(tx)
        tx.status = Status.sent

    def _sign(self, tx: Transaction) -> None:
        r, s = random_hex(32), random_hex(32)
        v = 27 + int(random_hex(1), 16) % 2
        tx.signature = {"r": r, "s": s, "v": v, "sig": f"0x{r}{s}{v:02x}"}
        tx.hash = "0x" + random_hex(32)
        tx.hashes.append(tx.hash)

    def _replace_with_noop(self, tx: Transaction, *, reason: str | None, canceled: bool) -> None:
        tx.to = tx.from_address
        tx.data = "0x"
        tx.value = 0
        tx.gas_limit = NOOP_GAS_LIMIT
        tx.is_noop = True
        if canceled:
            tx.is_canceled = True
        if reason is not None:
            tx.status_reason = reason
        if tx.status in (Status.sent, Status.submitted):
            self._sign(tx)  # the replacement is signed again: a new hash, same nonce
        if tx.status is Status.submitted:
            tx.sent_at = now_rfc3339()

    def _finish(self, tx: Transaction, status: Status, reason: str | None) -> None:
        tx.status = status
        if reason is not None:  # like upstream's partial update: None keeps the old reason
            tx.status_reason = reason
        tx.delete_at_ts = time.time() + self.retention_s
        heapq.heappush(self._retention, (tx.delete_at_ts, tx.id))
        self._parked.discard(tx.id)
        self._changed(tx)

    def _persist(self, tx: Transaction) -> None:
        """Mark for the next ledger flush: several changes in one interval cost one write."""
        self._dirty[tx.id] = tx

    def flush(self) -> int:
        """Queue the state of every transaction changed since the last flush."""
        dirty, self._dirty = self._dirty, {}
        for tx in dirty.values():
            self._ledger.save(tx.id, tx.status, tx.nonce, orjson.dumps(tx.state()))
        return len(dirty)

    def _changed(self, tx: Transaction) -> None:
        self.transitions[tx.status] += 1
        self._dirty[tx.id] = tx
        if self._webhooks.enabled:
            self._webhooks.transaction_update(tx.response())

    # -- retention and expiry of held transactions ------------------------------------------------

    def maintain(self, now_ts: float | None = None) -> None:
        now_ts = time.time() if now_ts is None else now_ts
        while self._retention and self._retention[0][0] <= now_ts:
            _, tx_id = heapq.heappop(self._retention)
            tx = self._store.get(tx_id)
            if tx is None or not tx.is_final or (tx.delete_at_ts or 0) > now_ts:
                continue
            self._store.remove(tx_id)
            self._ledger.purge(tx_id, now_rfc3339())
            self.purged += 1
        if self._config.paused:
            return
        for tx_id in list(self._parked):
            tx = self._store.get(tx_id)
            if tx is None or tx.is_final:
                self._parked.discard(tx_id)
            elif (
                tx.status in (Status.sent, Status.submitted)
                and not tx.is_noop
                and tx.valid_until_ts <= now_ts
            ):
                self._replace_with_noop(tx, reason=EXPIRED_NOOP_REASON, canceled=False)
                self._changed(tx)

    async def _flush_periodically(self) -> None:
        while True:
            await asyncio.sleep(self._persist_interval_s)
            try:
                self.flush()
            except Exception:
                log.exception("stub.lifecycle.flush_failed")

    async def _maintain(self) -> None:
        while True:
            await asyncio.sleep(self._maintenance_interval_s)
            try:
                self.maintain()
            except Exception:
                log.exception("stub.lifecycle.maintenance_failed")
