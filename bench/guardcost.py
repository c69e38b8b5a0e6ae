"""The accept path's policy code alone, in a loop: what the guard adds to a request with a
spend policy and a daily value budget spent from a lease, and with a fee budget on top (its
fee per gas from the oracle's setting, its fee reserved from a second lease). No I/O: a lease
is taken once per ``RELAY_BUDGET_LEASE_S``, outside the loop. ``python -m bench.guardcost [N]``
prints both; ``make bench`` runs it too (the ``fees`` scenario)."""

from __future__ import annotations

import asyncio
import sys
import time

from relay_api.limits.budget import Budgets, _Lease
from relay_core import spending
from relay_core.db.models import utcnow
from relay_core.fees import FeeOracle
from relay_core.policy import Spend, SpendPolicy

DEAD = "0x000000000000000000000000000000000000dead"
HUGE = 10**30


def _policy(fees: bool) -> SpendPolicy:
    return SpendPolicy(
        granted=True,
        allowed_to=frozenset({DEAD}),
        max_value_wei=10,
        daily_value_wei=HUGE,
        max_gas=10**6,
        max_fee_wei=HUGE if fees else None,
        daily_fee_wei=HUGE if fees else None,
        speeds=frozenset({"average", "fast"}) if fees else frozenset(),
    )


async def per_request_us(n: int, *, fees: bool = False) -> float:
    """CPU per request of the guard as the accept path runs it (relay_api.relay.service)."""
    budgets = Budgets(sessions=None, lease_s=1e9)  # type: ignore[arg-type]  # never asked
    for kind in (spending.VALUE, spending.FEE):
        lease = _Lease(HUGE, utcnow(), HUGE // 32, time.monotonic() + 1e9)
        budgets._leases[("client", kind.rule)] = lease
    oracle = FeeOracle(None, 100_000_000_000)
    spend_policy = _policy(fees)
    request = {"to": DEAD, "value": "1", "gasLimit": "100000"}
    started = time.process_time()
    for _ in range(n):
        fee_per_gas = None
        if spend_policy.prices_fees:
            fee_per_gas = await oracle.max_fee_per_gas(request.get("speed"))
        spend = Spend.of("direct", request, fee_per_gas=fee_per_gas)
        spend_policy.check(spend)
        await budgets.reserve(
            None,  # type: ignore[arg-type]
            "client",
            spend_policy,
            spend.value,
            spend.fee or 0,
        )
    return (time.process_time() - started) / n * 1e6


async def both(n: int) -> dict[str, float]:
    """Fee budget off and on, interleaved in halves so that drift shows in neither alone."""
    off: list[float] = []
    on: list[float] = []
    for _ in range(2):
        off.append(await per_request_us(n // 2))
        on.append(await per_request_us(n // 2, fees=True))
    return {"off_us": round(min(off), 2), "on_us": round(min(on), 2), "requests": n}


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    measured = asyncio.run(both(n))
    sys.stdout.write(
        f"guard per request: {measured['off_us']:.1f} µs of CPU without a fee budget, "
        f"{measured['on_us']:.1f} µs with one ({n:,} requests)\n"
    )


if __name__ == "__main__":
    main()
