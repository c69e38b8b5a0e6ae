"""Chain mode's receipts followed (relayer_stub.chain.service): a watcher follows the chain
head, reads each new block's receipts, and moves the transactions it finds; one the node has
forgotten (a restarted node with no pool) is broadcast again."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from eth_account.signers.local import LocalAccount

from relay_core import evm
from relayer_stub.transactions.models import Status, Transaction, now_rfc3339
from relayer_stub.transactions.store import TransactionStore

log = logging.getLogger(__name__)

FORGOTTEN_CHECK_S = 10.0  # how often submitted transactions without a receipt are checked
BLOCKS_AT_ONCE = 16  # block receipts asked for at a time


class Watcher:
    """The transactions the node has taken, followed to their receipt: ``mined`` with a
    successful one, ``confirmed`` after ``confirmations`` blocks, ``failed`` with the revert
    reason when the receipt says so (through ``finish`` and ``changed``, the lifecycle's)."""

    def __init__(
        self,
        rpc: evm.EvmRpc,
        store: TransactionStore,
        signers: dict[str, LocalAccount],
        *,
        confirmations: int,
        poll_interval_s: float,
        finish: Callable[[Transaction, Status, str | None], None],
        changed: Callable[[Transaction], None],
    ) -> None:
        self._rpc = rpc
        self._store = store
        self._signers = signers
        self._confirmations = confirmations
        self._poll_interval_s = poll_interval_s
        self._finish = finish
        self._changed = changed
        self.watching: dict[str, str] = {}  # hash -> transaction id
        # Hashes the node took since the watcher's last pass: their block may already have
        # been read (with automine a send is mined before its broadcast returns).
        self._fresh: set[str] = set()
        self.mined: set[str] = set()
        self.next_block: int | None = None
        self._next_forgotten_check = 0.0
        self.resends = 0

    def watch(self, tx_hash: str, tx_id: str, *, fresh: bool = False) -> None:
        """Look for the receipt of ``tx_hash``; ``fresh``: the node has just taken it."""
        self.watching[tx_hash] = tx_id
        if fresh:
            self._fresh.add(tx_hash)

    def reset(self) -> None:
        self.watching.clear()
        self.mined.clear()

    async def run(self) -> None:
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
        if self.next_block is None:
            # Where to start: the oldest unsettled transaction may already be mined.
            self.next_block = max(0, head - 1000) if (self.watching or self.mined) else head
        while self.next_block <= head:
            # Blocks are asked for a few at once (a remote node's round trips overlap, as with
            # a block per send there are many) and taken in order.
            blocks = range(self.next_block, min(head, self.next_block + BLOCKS_AT_ONCE - 1) + 1)
            if self.watching:
                for receipts in await asyncio.gather(
                    *(self._rpc.call("eth_getBlockReceipts", hex(n)) for n in blocks)
                ):
                    for receipt in receipts or []:
                        tx_id = self.watching.get(str(receipt.get("transactionHash")))
                        if tx_id is not None:
                            await self._on_receipt(tx_id, receipt)
            self.next_block = blocks[-1] + 1
        pairs = [(h, t) for h in fresh if (t := self.watching.get(h)) is not None]
        receipts = await asyncio.gather(*(self._rpc.receipt(h) for h, _ in pairs))
        for (_, tx_id), receipt in zip(pairs, receipts, strict=True):
            if receipt is not None:
                await self._on_receipt(tx_id, receipt)
        for tx_id in list(self.mined):
            tx = self._store.get(tx_id)
            if tx is None or tx.is_final or tx.mined_block is None:
                self.mined.discard(tx_id)
            elif head - tx.mined_block + 1 >= self._confirmations:
                self.mined.discard(tx_id)
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
        for tx_hash, tx_id in list(self.watching.items()):
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
                if "nonce too low" in exc.message.lower() and not await node_has(
                    self._rpc, tx_hash
                ):
                    del self.watching[tx_hash]
                    self._finish(
                        tx, Status.failed, "dropped by the node, and its nonce used by another"
                    )

    async def _on_receipt(self, tx_id: str, receipt: dict[str, Any]) -> None:
        tx = self._store.get(tx_id)
        for tx_hash in [h for h, t in self.watching.items() if t == tx_id]:
            del self.watching[tx_hash]
        if tx is None or tx.is_final:
            return
        mined_hash = str(receipt["transactionHash"])
        if mined_hash != tx.hash:
            # An earlier version won over its replacement (a replace, or a cancel's or an
            # expiry's no-op): the chain decided, and the record says what it mined.
            tx.take_version(mined_hash)
        tx.mined_block = int(receipt["blockNumber"], 16)
        if int(receipt.get("status", "0x1"), 16) == 0:
            self._finish(tx, Status.failed, await self._revert_reason(tx))
            return
        tx.status = Status.mined
        self._changed(tx)
        self.mined.add(tx.id)

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


async def node_has(rpc: evm.EvmRpc, tx_hash: str) -> bool:
    try:
        return await rpc.transaction(tx_hash) is not None
    except evm.RpcUnavailable:
        return False
