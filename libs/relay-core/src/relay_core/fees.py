"""What a transaction can cost the relayer's wallet in fees, before it is sent: its gas limit
times the most a unit of gas can cost at its speed. A client's fee budget (relay_core.policy)
reserves that at accept and settles it to the receipt's fee (gas used x effective price) once
the transaction is mined.

The most a unit of gas can cost at a speed: with a chain configured (``RELAY_CHAIN_RPC_URL``),
twice the latest block's base fee plus a tip, times the speed's factor (the executor prices a
speed as that factor times base fee plus tip: OZ Relayer and the relayer-stub alike; twice the
base fee covers its growth over the next blocks, 12.5 % a full block at most); read at most
every ``ttl_s``. Without a chain, ``RELAY_MAX_FEE_PER_GAS_WEI`` times the factor. A transaction
that ends up paying more than was reserved is settled to what it paid: the budget counts
what the wallet spent.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from relay_core import evm

log = logging.getLogger(__name__)

# Each speed's price as a share of the base price, as OZ Relayer and the relayer-stub price it.
SPEED_PERCENT = {"safeLow": 100, "average": 125, "fast": 150, "fastest": 200}
SPEEDS = tuple(SPEED_PERCENT)
DEFAULT_SPEED = "fast"  # what the executor is asked for when a request names none
TIP_WEI = 2_000_000_000  # the tip above the base fee allowed for (2 gwei)


def fee_of(gas_limit: int | None, fee_per_gas: int) -> int | None:
    """The most a transaction can cost; None when its gas limit is not known."""
    return None if gas_limit is None else gas_limit * fee_per_gas


class FeeOracle:
    """The most a unit of gas can cost at each speed, from the chain (cached) or a setting."""

    def __init__(
        self,
        rpc: evm.EvmRpc | None,
        default_wei: int,
        *,
        ttl_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._rpc = rpc
        self._default = default_wei
        self._ttl_s = ttl_s
        self._clock = clock
        self._base: int | None = None
        self._read_at = float("-inf")
        self._reading: asyncio.Lock | None = None

    async def max_fee_per_gas(self, speed: str | None) -> int:
        base = await self._base_price()
        return base * SPEED_PERCENT.get(speed or DEFAULT_SPEED, 200) // 100

    async def _base_price(self) -> int:
        if self._rpc is None:
            return self._default
        if self._base is not None and self._clock() - self._read_at < self._ttl_s:
            return self._base
        self._reading = self._reading or asyncio.Lock()
        async with self._reading:  # one read however many requests want it
            if self._base is not None and self._clock() - self._read_at < self._ttl_s:
                return self._base
            try:
                block = await self._rpc.call("eth_getBlockByNumber", "latest", False)
                base_fee = (block or {}).get("baseFeePerGas")
                if base_fee is None:  # a chain without EIP-1559: its gas price
                    self._base = 2 * await self._rpc.gas_price()
                else:
                    self._base = 2 * int(str(base_fee), 16) + TIP_WEI
            except (evm.RpcError, evm.RpcUnavailable) as exc:
                if self._base is None:
                    log.warning("fees.chain_unreadable", extra={"error": str(exc)[:200]})
                    return self._default
                # (the last price read stands for a while: a chain hiccup refuses nothing)
            self._read_at = self._clock()
            return self._base if self._base is not None else self._default
