"""Chain mode: the same API and statuses, driven by a real EVM node over JSON-RPC.

Every accepted transaction is signed with the relayer's key and broadcast; its status comes
from the chain: ``sent`` once signed (nonce, price, hash), ``submitted`` once the node has it,
``mined`` with a successful receipt, ``confirmed`` after ``confirmations`` blocks, ``failed``
with the revert reason when the receipt says so.

Nonces never leave a gap. One sender per relayer takes transactions in the order they were
accepted and gives each the next nonce; the nonce moves on only once the node *has* the
transaction: it answered the broadcast, or, when the broadcast got no answer, it knows the
hash when asked. A broadcast the node refuses gives its nonce back to the next transaction
(the refused one fails with the node's reason after a few tries); one without an answer is
sent again, the same signed bytes, until the node answers one way or the other. The counter
starts from the node's pending nonce and is set to it again whenever the node says "nonce too
low", so a restarted stub, or another sender of the same account, cannot jam it. (The
OpenZeppelin Relayer's permanent "nonce too high" jams, its issues #818 and #843, came from
advancing the counter for a send the node never took.)

Transactions are priced and signed by relayer_stub.chain.signing, and followed to their
receipts by relayer_stub.chain.watcher.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import deque
from typing import Any

from eth_account.signers.local import LocalAccount

from relay_core import evm
from relayer_stub.chain import signing
from relayer_stub.chain.watcher import Watcher, node_has
from relayer_stub.errors import ProviderFailed
from relayer_stub.lifecycle.pricing import replacement_gas_price
from relayer_stub.lifecycle.replacement import ensure_replaceable, replacement_speed, take_terms
from relayer_stub.lifecycle.service import EXPIRED_PENDING_REASON, Lifecycle
from relayer_stub.transactions.models import Status, Transaction, now_rfc3339
from relayer_stub.transactions.schemas import SendRequest, signing_problem

log = logging.getLogger(__name__)

REFUSALS_BEFORE_FAILING = 3


class ChainLifecycle(Lifecycle):
    def __init__(
        self,
        *args: Any,
        rpc: evm.EvmRpc,
        signers: dict[str, LocalAccount],
        confirmations: int,
        poll_interval_s: float,
        priority_fee_wei: int = 1_000_000_000,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._rpc = rpc
        self._signers = signers
        self._priority_fee = priority_fee_wei
        self._chain_id: int | None = None
        self._queues: dict[str, deque[str]] = {rid: deque() for rid in signers}
        self._wake: dict[str, asyncio.Event] = {rid: asyncio.Event() for rid in signers}
        self._synced: set[str] = set()
        self._watcher = Watcher(
            rpc,
            self._store,
            signers,
            confirmations=confirmations,
            poll_interval_s=poll_interval_s,
            finish=self._finish,
            changed=self._changed,
        )
        self._tasks: list[asyncio.Task[None]] = []
        self.broadcasts = 0
        self.resends = 0

    # -- start-up and shutdown ---------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        super().start(loop)
        for relayer_id in self._signers:
            self._tasks.append(loop.create_task(self._send_loop(relayer_id), name="chain-send"))
        self._tasks.append(loop.create_task(self._watcher.run(), name="chain-watch"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        await super().stop()

    def reset(self) -> None:
        super().reset()
        for queue in self._queues.values():
            queue.clear()
        self._watcher.reset()
        self._synced.clear()

    def stats(self) -> dict[str, Any]:
        return super().stats() | {
            "chain": {
                "queued": {rid: len(q) for rid, q in self._queues.items()},
                "jammed": [rid for rid in self._queues if self._faults.jammed(rid)],
                "watching": len(self._watcher.watching),
                "mined_unconfirmed": len(self._watcher.mined),
                "broadcasts": self.broadcasts,
                "resends": self.resends + self._watcher.resends,
                "next_block": self._watcher.next_block,
            }
        }

    def configure(self, config: Any) -> None:
        super().configure(config)
        self._wake_senders()  # a pause may have ended

    def _faults_changed(self) -> None:
        super()._faults_changed()
        self._wake_senders()  # a jam may have been lifted

    def _wake_senders(self) -> None:
        for event in self._wake.values():
            event.set()

    async def balance(self, relayer_id: str) -> int:
        """The relayer's account balance on the node (``eth_getBalance``, latest block)."""
        try:
            return await self._rpc.balance(self._signers[relayer_id].address, "latest")
        except (evm.RpcError, evm.RpcUnavailable) as exc:
            raise ProviderFailed(f"Failed to fetch the relayer's balance: {exc}") from exc

    # -- the API's entry points ----------------------------------------------------------------

    def admit(self, tx: Transaction) -> None:
        """Nothing is decided up front: the chain decides."""
        tx.will_fail = False

    def track(self, tx: Transaction) -> None:
        if tx.relayer_id not in self._signers:
            self._finish(tx, Status.failed, "chain mode has no key for this relayer")
            return
        if tx.status is Status.pending or (tx.status is Status.sent and tx.raw is None):
            self._queues[tx.relayer_id].append(tx.id)
            self._wake[tx.relayer_id].set()
        elif tx.status is Status.sent:
            # Signed before a restart; the node may or may not have it: the sender finds out.
            self._queues[tx.relayer_id].appendleft(tx.id)
            self._wake[tx.relayer_id].set()
        elif tx.status is Status.submitted:
            for tx_hash in tx.hashes or [tx.hash or ""]:
                self._watcher.watch(tx_hash, tx.id)
        elif tx.status is Status.mined:
            self._watcher.mined.add(tx.id)

    # -- the sender -------------------------------------------------------------------------------

    async def _send_loop(self, relayer_id: str) -> None:
        queue, wake = self._queues[relayer_id], self._wake[relayer_id]
        while True:
            # Paused, or this relayer jammed: nothing is taken from the queue (it stays pending).
            while not queue or self._config.paused or self._faults.jammed(relayer_id):
                wake.clear()
                await wake.wait()
            tx = self._store.get(queue[0])
            if tx is None or tx.is_final:
                queue.popleft()
                continue
            try:
                done = await self._send(tx)
            except asyncio.CancelledError:
                raise
            except (evm.RpcError, evm.RpcUnavailable) as exc:
                log.warning(
                    "stub.chain.node_unavailable",
                    extra={"transaction_id": tx.id, "error": str(exc)},
                )
                done = False
            except Exception:
                log.exception("stub.chain.send_failed", extra={"transaction_id": tx.id})
                done = False
            if done:
                queue.popleft()
            else:
                await asyncio.sleep(0.5 + random.uniform(0, 0.5))  # the node is not answering

    async def _send(self, tx: Transaction) -> bool:
        """Take ``tx`` as far as the node having it (or failing it). False: try again later
        (the node did not answer); the transaction keeps its place and its nonce."""
        signer = self._signers[tx.relayer_id]
        if tx.relayer_id not in self._synced:
            await self._sync_nonce(tx.relayer_id, signer.address)
        if tx.status is Status.pending:
            if time.time() >= tx.valid_until_ts:
                self._finish(tx, Status.failed, EXPIRED_PENDING_REASON)
                return True
            problem = signing_problem(tx.to, tx.data)
            if problem is not None:
                self._finish(tx, Status.failed, problem)
                return True
            await self._sign_next(tx, signer)
        return await self._broadcast(tx)

    async def _sync_nonce(self, relayer_id: str, address: str) -> None:
        pending = await self._rpc.nonce(address, "pending")
        if self._nonces.get(relayer_id) != pending:
            log.info(
                "stub.chain.nonce_synced",
                extra={
                    "relayer_id": relayer_id,
                    "was": self._nonces.get(relayer_id),
                    "now": pending,
                },
            )
        self._nonces[relayer_id] = pending
        self._synced.add(relayer_id)

    async def _sign_next(self, tx: Transaction, signer: LocalAccount) -> None:
        if self._chain_id is None:
            self._chain_id = await self._rpc.chain_id()
        tx.nonce = self._nonces[tx.relayer_id]
        while True:
            # A replace may change the terms while the node is asked: then ask for the new ones.
            asked = tx.terms()
            gas_limit, gas_price = tx.gas_limit, tx.gas_price
            if gas_limit is None:
                gas_limit = await signing.estimate(self._rpc, tx, signer.address)
            if gas_price is None and tx.max_fee_per_gas is None:
                gas_price = await signing.price(self._rpc, tx.speed or "fast", self._priority_fee)
            if tx.terms() == asked:
                break
        tx.gas_limit, tx.gas_price = gas_limit, gas_price
        signing.sign(tx, signer, self._chain_id)
        tx.status = Status.sent
        self._changed(tx)

    async def _broadcast(self, tx: Transaction) -> bool:
        refusals = 0
        while True:
            # The version sent now: a replace or a cancel may sign another while it is on its way.
            raw, sent_hash = tx.raw, tx.hash
            assert raw is not None
            assert sent_hash is not None
            try:
                if self._faults.drops_broadcast():
                    raise evm.RpcUnavailable("broadcast lost on the way (fault injected)")
                if self._faults.rejects_broadcast():
                    raise evm.RpcError(-32000, "the node refused the transaction (fault injected)")
                self.broadcasts += 1
                await self._rpc.send_raw(raw)
            except evm.RpcUnavailable as exc:
                # No answer: the node may have it. Ask; if it does not, send the same bytes.
                log.warning("stub.chain.broadcast_unanswered", extra={"transaction_id": tx.id})
                try:
                    known = await self._rpc.transaction(sent_hash) is not None
                except evm.RpcUnavailable:
                    return False  # still no answer: the sender comes back to it
                if not known:
                    self.resends += 1
                    log.info("stub.chain.resend", extra={"transaction_id": tx.id, "why": str(exc)})
                    continue
            except evm.RpcError as exc:
                if await node_has(self._rpc, sent_hash):
                    pass  # "already known" and the like: it is there
                elif "nonce too low" in exc.message.lower():
                    # Someone else used this nonce: sign again with the node's pending nonce.
                    await self._sync_nonce(tx.relayer_id, self._signers[tx.relayer_id].address)
                    tx.status = Status.pending
                    await self._sign_next(tx, self._signers[tx.relayer_id])
                    continue
                else:
                    refusals += 1
                    log.warning(
                        "stub.chain.broadcast_refused",
                        extra={"transaction_id": tx.id, "why": exc.message, "refusals": refusals},
                    )
                    if refusals < REFUSALS_BEFORE_FAILING:
                        await asyncio.sleep(0.2 * refusals)
                        continue
                    # Never taken: its nonce goes to the next transaction, no gap.
                    tx.nonce = None
                    self._finish(tx, Status.failed, f"the node refused it: {exc.message}")
                    return True
            self._taken(tx, sent_hash)
            return True

    def _taken(self, tx: Transaction, sent_hash: str) -> None:
        """The node has ``tx`` (the version ``sent_hash``): its nonce is spent; the chain
        decides the rest."""
        assert tx.nonce is not None
        self._nonces[tx.relayer_id] = max(self._nonces[tx.relayer_id], tx.nonce + 1)
        if tx.status is Status.sent:
            tx.status = Status.submitted
            tx.sent_at = now_rfc3339()
            self._changed(tx)
        self._watcher.watch(sent_hash, tx.id, fresh=True)
        if tx.hash != sent_hash:
            # Signed again while this version was on its way: the new one follows, to outbid it.
            assert self._loop is not None
            self._loop.create_task(self._broadcast_replacement(tx))

    # -- replace, cancel and expiry: another version at the same nonce -------------------------

    async def replace(self, tx: Transaction, request: SendRequest) -> None:
        """Not signed yet (pending, a jammed relayer's too): the new terms wait for the sender.
        Signed: signed again at its nonce, priced at the new speed's price or what outbids the
        version sent, whichever is higher, and sent to the node after it; the watcher follows
        every version, and the one the chain mines decides (``Transaction.take_version``)."""
        ensure_replaceable(tx, request)
        if tx.status is not Status.pending:
            speed = replacement_speed(tx, request)
            try:
                market = await signing.price(self._rpc, speed, self._priority_fee)
            except (evm.RpcError, evm.RpcUnavailable) as exc:
                raise ProviderFailed(f"Failed to price the replacement: {exc}") from exc
            ensure_replaceable(tx, request)  # mined or canceled while the node answered?
        if tx.status is Status.pending:
            # Not signed yet (or sent back meanwhile, to be signed at the node's nonce).
            await super().replace(tx, request)
            return
        gas_price = replacement_gas_price(tx, market)
        take_terms(tx, request)
        tx.gas_price = gas_price
        self._sign_again(tx)
        self._changed(tx)
        log.info("stub.chain.replaced", extra={"transaction_id": tx.id, "nonce": tx.nonce})

    def _sign_again(self, tx: Transaction) -> None:
        """Sign the terms ``tx`` has now at its nonce; once submitted, send them to the node
        (while sent, the sender sends the version it finds, or this one after it: _taken)."""
        signing.sign(tx, self._signers[tx.relayer_id], self._chain_id)
        if tx.status is Status.submitted:
            assert self._loop is not None
            self._loop.create_task(self._broadcast_replacement(tx))

    def _replace_with_noop(self, tx: Transaction, *, reason: str | None, canceled: bool) -> None:
        if tx.status not in (Status.sent, Status.submitted) or tx.nonce is None:
            super()._replace_with_noop(tx, reason=reason, canceled=canceled)
            return
        original = dict(to=tx.to, data=tx.data, value=tx.value, gas=tx.gas_limit)
        tx.to, tx.data, tx.value, tx.gas_limit = tx.from_address, "0x", 0, 21_000
        tx.is_noop = True
        tx.is_canceled = tx.is_canceled or canceled
        if reason is not None:
            tx.status_reason = reason
        signing.outbid(tx)
        self._sign_again(tx)
        log.info(
            "stub.chain.replaced_with_noop",
            extra={"transaction_id": tx.id, "nonce": tx.nonce, "original": original},
        )

    async def _broadcast_replacement(self, tx: Transaction) -> None:
        raw, sent_hash = tx.raw, tx.hash
        assert raw is not None
        assert sent_hash is not None
        try:
            await self._rpc.send_raw(raw)
        except (evm.RpcError, evm.RpcUnavailable) as exc:
            # The original may already be mined: then the chain has decided.
            log.info(
                "stub.chain.replacement_refused", extra={"transaction_id": tx.id, "why": str(exc)}
            )
            return
        # Fresh: with automine the block may be mined, and read, before the broadcast returns.
        self._watcher.watch(sent_hash, tx.id, fresh=True)
