"""The node as the stub reaches it: relay_core's JSON-RPC client, each call delayed by a set
round trip (``STUB_CHAIN_RPC_LATENCY_MS``) so a loopback anvil can stand for a remote node.

A relayer's sender waits on the node three times per transaction (estimate, price, broadcast)
and sends one transaction at a time; it is that wait, not the CPU, that makes one relayer a
ceiling on a real network. On loopback the wait is gone and the ceiling with it, so a pool's
gain cannot be seen; with the delay it can."""

from __future__ import annotations

import asyncio
from typing import Any

from relay_core.evm import EvmRpc


class RemoteRpc(EvmRpc):
    def __init__(self, url: str, *, latency_s: float = 0.0, timeout_s: float = 10.0) -> None:
        super().__init__(url, timeout_s=timeout_s)
        self.latency_s = latency_s

    async def call(self, method: str, *params: Any) -> Any:
        if self.latency_s > 0:
            await asyncio.sleep(self.latency_s)
        return await super().call(method, *params)
