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

A watcher follows the chain head, reads each new block's receipts, and moves the
transactions it finds; one the node has forgotten (a restarted node with no pool) is
broadcast again.
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
from eth_utils import to_checksum_address

from relay_core import evm
from relayer_stub.faults.service import FaultInjector
from relayer_stub.lifecycle.service import (
    EXPIRED_PENDING_REASON,
    SPEED_PERCENT,
    Lifecycle,
    fallback_gas_limit,
)
from relayer_stub.transactions.models import Status, Transaction, now_rfc3339
from relayer_stub.transactions.schemas import signing_problem

log = logging.getLogger(__name__)

REFUSALS_BEFORE_FAILING = 3
GAS_MARGIN_PERCENT = 110  # upstream adds 10 % to an estimate
REPLACEMENT_PRICE_PERCENT = 125  # a replacement must outbid the original (nodes want +10 %)
FORGOTTEN_CHECK_S = 10.0  # how often submitted transactions without a receipt are checked


class ChainLifecycle(Lifecycle):
    def __init__(
        self,
        *args: Any,
        rpc: evm.EvmRpc,
        signers: dict[str, LocalAccount],
        faults: FaultInjector,
        confirmations: int,
        poll_interval_s: float,
        priority_fee_wei: int = 1_000_000_000,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._rpc = rpc
        self._signers = signers
        self._faults = faults
        self._confirmations = confirmations
        self._poll_interval_s = poll_interval_s
        self._priority_fee = priority_fee_wei
        self._chain_id: int | None = None
        self._queues: dict[str, deque[str]] = {rid: deque() for rid in signers}
        self._wake: dict[str, asyncio.Event] = {rid: asyncio.Event() for rid in signers}
        self._synced: set[str] = set()
        self._watching: dict[str, str] = {}  # hash -> transaction id
        # Hashes the node took since the watcher's last pass: their block may already have
        # been read (with automine a send is mined before its broadcast returns).
        self._fresh: set[str] = set()
        self._mined: set[str] = set()
        self._next_block: int | None = None
        self._next_forgotten_check = 0.0
        self._tasks: list[asyncio.Task[None]] = []
        self.broadcasts = 0
        self.resends = 0

    # -- start-up and shutdown ---------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        super().start(loop)
        for relayer_id in self._signers:
            self._tasks.append(loop.create_task(self._send_loop(relayer_id), name="chain-send"))
        self._tasks.append(loop.create_task(self._watch_loop(), name="chain-watch"))

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
        self._watching.clear()
        self._mined.clear()
        self._synced.clear()

    def stats(self) -> dict[str, Any]:
        return super().stats() | {
            "chain": {
                "queued": {rid: len(q) for rid, q in self._queues.items()},
                "watching": len(self._watching),
                "mined_unconfirmed": len(self._mined),
                "broadcasts": self.broadcasts,
                "resends": self.resends,
                "next_block": self._next_block,
            }
        }

    def configure(self, config: Any) -> None:
        super().configure(config)
        for event in self._wake.values():
            event.set()  # a pause may have ended

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
                self._watching[tx_hash] = tx.id
        elif tx.status is Status.mined:
            self._mined.add(tx.id)

    # -- the sender -------------------------------------------------------------------------------

    async def _send_loop(self, relayer_id: str) -> None:
        queue, wake = self._queues[relayer_id], self._wake[relayer_id]
        while True:
            while not queue or self._config.paused:
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
        if tx.gas_limit is None:
            tx.gas_limit = await self._estimate(tx, signer.address)
        if tx.gas_price is None and tx.max_fee_per_gas is None:
            tx.gas_price = await self._price(tx.speed or "fast")
        self._sign_with(tx, signer)
        tx.status = Status.sent
        self._changed(tx)

    async def _price(self, speed: str) -> int:
        """(The latest base fee + a tip) x the speed's factor. Not ``eth_gasPrice``: a dev
        node suggests from recent transactions, which are ours, so each price would be the
        last one x the factor, growing until the relayer cannot pay."""
        block = await self._rpc.call("eth_getBlockByNumber", "latest", False)
        base_fee = (block or {}).get("baseFeePerGas")
        if base_fee is None:  # a chain without EIP-1559
            base = await self._rpc.gas_price()
        else:
            base = int(base_fee, 16) + self._priority_fee
        return base * SPEED_PERCENT[speed] // 100

    async def _estimate(self, tx: Transaction, sender: str) -> int:
        """As upstream: the node's estimate plus 10 %, or a fixed fallback when estimation
        fails (a call that would revert is still sent, and fails on chain)."""
        try:
            estimate = await self._rpc.estimate_gas(
                {"from": sender, "to": _address(tx.to), "data": tx.data or "0x", "value": tx.value}
            )
        except evm.RpcError as exc:
            log.info(
                "stub.chain.estimate_failed",
                extra={"transaction_id": tx.id, "why": evm.decode_revert(exc.revert_data)},
            )
            return fallback_gas_limit(tx.data)
        return estimate * GAS_MARGIN_PERCENT // 100

    def _sign_with(self, tx: Transaction, signer: LocalAccount) -> None:
        fields: dict[str, Any] = {
            "nonce": tx.nonce,
            "gas": tx.gas_limit,
            "to": _address(tx.to),
            "value": tx.value,
            "data": tx.data or "0x",
            "chainId": self._chain_id,
        }
        if tx.max_fee_per_gas is not None:
            fields |= {
                "maxFeePerGas": tx.max_fee_per_gas,
                "maxPriorityFeePerGas": tx.max_priority_fee_per_gas,
                "type": 2,
            }
        else:
            fields["gasPrice"] = tx.gas_price
        signed = signer.sign_transaction(fields)
        tx.raw = "0x" + signed.raw_transaction.hex().removeprefix("0x")
        tx.hash = "0x" + signed.hash.hex().removeprefix("0x")
        tx.hashes.append(tx.hash)
        v = int(signed.v)
        r, s = f"{signed.r:064x}", f"{signed.s:064x}"
        tx.signature = {"r": r, "s": s, "v": v, "sig": f"0x{r}{s}{v % 256:02x}"}

    async def _broadcast(self, tx: Transaction) -> bool:
        assert tx.raw is not None
        assert tx.hash is not None
        refusals = 0
        while True:
            try:
                if self._faults.drops_broadcast():
                    raise evm.RpcUnavailable("broadcast lost on the way (fault injected)")
                if self._faults.rejects_broadcast():
                    raise evm.RpcError(-32000, "the node refused the transaction (fault injected)")
                self.broadcasts += 1
                await self._rpc.send_raw(tx.raw)
            except evm.RpcUnavailable as exc:
                # No answer: the node may have it. Ask; if it does not, send the same bytes.
                log.warning("stub.chain.broadcast_unanswered", extra={"transaction_id": tx.id})
                try:
                    known = await self._rpc.transaction(tx.hash) is not None
                except evm.RpcUnavailable:
                    return False  # still no answer: the sender comes back to it
                if not known:
                    self.resends += 1
                    log.info("stub.chain.resend", extra={"transaction_id": tx.id, "why": str(exc)})
                    continue
            except evm.RpcError as exc:
                if await self._node_has(tx):
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
            self._taken(tx)
            return True

    async def _node_has(self, tx: Transaction) -> bool:
        try:
            return await self._rpc.transaction(tx.hash or "") is not None
        except evm.RpcUnavailable:
            return False

    def _taken(self, tx: Transaction) -> None:
        """The node has ``tx``: its nonce is spent; the chain decides the rest."""
        assert tx.nonce is not None
        assert tx.hash is not None
        self._nonces[tx.relayer_id] = max(self._nonces[tx.relayer_id], tx.nonce + 1)
        if tx.status is Status.sent:
            tx.status = Status.submitted
            tx.sent_at = now_rfc3339()
            self._changed(tx)
        self._watching[tx.hash] = tx.id
        self._fresh.add(tx.hash)

    # -- the watcher ------------------------------------------------------------------------------

    async def _watch_loop(self) -> None:
        while True:
            await asyncio.sleep(self._poll_interval_s)
            try:
                await self._follow_head()
            except (evm.RpcError, evm.RpcUnavailable) as exc:
                log.info("stub.chain.watch_failed", extra={"error": str(exc)})
            except Exception:
                log.exception("stub.chain.watch_failed")

    async def _follow_head(self) -> None:
        fresh, self._fresh = self._fresh, set()
        head = await self._rpc.block_number()
        await self._resend_forgotten()
        if self._next_block is None:
            # Where to start: the oldest unsettled transaction may already be mined.
            self._next_block = max(0, head - 1000) if (self._watching or self._mined) else head
        while self._next_block <= head:
            if self._watching:
                receipts = await self._rpc.call("eth_getBlockReceipts", hex(self._next_block))
                for receipt in receipts or []:
                    tx_id = self._watching.get(str(receipt.get("transactionHash")))
                    if tx_id is not None:
                        await self._on_receipt(tx_id, receipt)
            self._next_block += 1
        for tx_hash in fresh:
            tx_id = self._watching.get(tx_hash)
            if tx_id is not None:
                receipt = await self._rpc.receipt(tx_hash)
                if receipt is not None:
                    await self._on_receipt(tx_id, receipt)
        for tx_id in list(self._mined):
            tx = self._store.get(tx_id)
            if tx is None or tx.is_final or tx.mined_block is None:
                self._mined.discard(tx_id)
            elif head - tx.mined_block + 1 >= self._confirmations:
                self._mined.discard(tx_id)
                tx.confirmed_at = now_rfc3339()
                if tx.is_noop and not tx.is_canceled:
                    self._finish(tx, Status.confirmed, None)  # upstream: an expiry no-op
                else:
                    self._finish(tx, Status.canceled if tx.is_canceled else Status.confirmed, None)

    async def _resend_forgotten(self) -> None:
        """A submitted transaction the node no longer knows (restarted without its pool) is
        sent again, the same signed bytes; one whose nonce was used by another is failed."""
        now = time.monotonic()
        if now < self._next_forgotten_check:
            return
        self._next_forgotten_check = now + FORGOTTEN_CHECK_S
        for tx_hash, tx_id in list(self._watching.items()):
            tx = self._store.get(tx_id)
            if tx is None or tx.is_final or tx.raw is None or tx_hash != tx.hash:
                continue
            if await self._rpc.transaction(tx_hash) is not None:
                continue
            try:
                await self._rpc.send_raw(tx.raw)
                self.resends += 1
                log.warning("stub.chain.resent_forgotten", extra={"transaction_id": tx.id})
            except evm.RpcError as exc:
                if "nonce too low" in exc.message.lower() and not await self._node_has(tx):
                    del self._watching[tx_hash]
                    self._finish(
                        tx, Status.failed, "dropped by the node, and its nonce used by another"
                    )

    async def _on_receipt(self, tx_id: str, receipt: dict[str, Any]) -> None:
        tx = self._store.get(tx_id)
        for tx_hash in [h for h, t in self._watching.items() if t == tx_id]:
            del self._watching[tx_hash]
        if tx is None or tx.is_final:
            return
        mined_hash = str(receipt["transactionHash"])
        if mined_hash != tx.hash:
            # The original won over its replacement (or the other way round).
            tx.hash = mined_hash
            tx.is_noop = tx.is_canceled = False
        tx.mined_block = int(receipt["blockNumber"], 16)
        if int(receipt.get("status", "0x1"), 16) == 0:
            self._finish(tx, Status.failed, await self._revert_reason(tx))
            return
        tx.status = Status.mined
        self._changed(tx)
        self._mined.add(tx.id)

    async def _revert_reason(self, tx: Transaction) -> str:
        """Replay the call on the state it ran against to read why it reverted."""
        assert tx.mined_block is not None
        call = {
            "from": self._signers[tx.relayer_id].address,
            "to": tx.to,
            "data": tx.data or "0x",
            "value": tx.value,
            "gas": tx.gas_limit,
        }
        try:
            await self._rpc.eth_call(call, max(0, tx.mined_block - 1))
        except evm.RpcError as exc:
            return evm.decode_revert(exc.revert_data)
        except evm.RpcUnavailable:
            pass
        return "execution reverted (receipt status 0)"

    # -- cancel and expiry: a no-op at the same nonce ---------------------------------------------

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
        if tx.gas_price is not None:
            tx.gas_price = tx.gas_price * REPLACEMENT_PRICE_PERCENT // 100 + 1
        else:
            assert tx.max_fee_per_gas is not None
            assert tx.max_priority_fee_per_gas is not None
            tx.max_fee_per_gas = tx.max_fee_per_gas * REPLACEMENT_PRICE_PERCENT // 100 + 1
            tx.max_priority_fee_per_gas = (
                tx.max_priority_fee_per_gas * REPLACEMENT_PRICE_PERCENT // 100 + 1
            )
        self._sign_with(tx, self._signers[tx.relayer_id])
        log.info(
            "stub.chain.replaced",
            extra={"transaction_id": tx.id, "nonce": tx.nonce, "original": original},
        )
        if tx.status is Status.submitted:
            assert self._loop is not None
            self._loop.create_task(self._broadcast_replacement(tx))

    async def _broadcast_replacement(self, tx: Transaction) -> None:
        assert tx.raw is not None
        assert tx.hash is not None
        try:
            await self._rpc.send_raw(tx.raw)
        except (evm.RpcError, evm.RpcUnavailable) as exc:
            # The original may already be mined: then the chain has decided.
            log.info(
                "stub.chain.replacement_refused", extra={"transaction_id": tx.id, "why": str(exc)}
            )
            return
        self._watching[tx.hash] = tx.id


def _address(value: str | None) -> str | None:
    """As upstream parses it: any case, no checksum check (a signer wants the checksum)."""
    return None if value is None else to_checksum_address(value.lower())
