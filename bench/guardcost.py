"""The accept path's policy code alone, in a loop: what the guard adds to a request with a
spend policy and a daily budget spent from a lease (no I/O: a lease is taken once per
``RELAY_BUDGET_LEASE_S``, outside the loop). ``python -m bench.guardcost [N]``."""

from __future__ import annotations

import asyncio
import sys
import time

from relay_api.limits.budget import Budgets, _Lease
from relay_core.db.models import utcnow
from relay_core.policy import Spend, SpendPolicy

DEAD = "0x000000000000000000000000000000000000dead"


async def per_request_us(n: int) -> float:
    budgets = Budgets(sessions=None, lease_s=1e9)  # type: ignore[arg-type]  # never asked
    budgets._leases["client"] = _Lease(10**30, utcnow(), 10**30 // 32, time.monotonic() + 1e9)
    policy = SpendPolicy(
        allowed_to=frozenset({DEAD}), max_value_wei=10, daily_value_wei=10**30, max_gas=10**6
    )
    request = {"to": DEAD, "value": "1", "gasLimit": "100000"}
    started = time.process_time()
    for _ in range(n):
        spend = Spend.of("direct", request)
        policy.check(spend)
        await budgets.reserve(None, "client", policy, spend.value)  # type: ignore[arg-type]
    return (time.process_time() - started) / n * 1e6


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    us = asyncio.run(per_request_us(n))
    sys.stdout.write(f"guard per request: {us:.1f} µs of CPU ({n:,} requests)\n")


if __name__ == "__main__":
    main()
