"""Changes tried from outside, to measure a gain (or a cost) without editing services/ or libs/
(``python -m bench --experiment NAME[,NAME]``; benchmark launchers only).

Each experiment monkeypatches the launched API and consumer processes; results are labelled
with the experiments applied. The ones measured so far, and what they showed, are in
docs/performance.md ("Measured experiments").

- ``no_gc_freeze``: leave CPython's collector as it is (undo ``relay_core.gctuning``), to show
  what freezing the start-up objects buys;
- ``asyncio_consumer``: run the consumer on the standard asyncio loop instead of uvloop;
- ``young_gc_2000``: collect the young generation every 2,000 net allocations instead of
  20,000 (``relay_core.gctuning.YOUNG_THRESHOLD``): shorter collections, ten times as many;
- ``no_rate_limit``: the API without its rate limiter (every request allowed without asking
  Redis), to show what the guard's limiter costs per request;
- ``accept_on_connection``: the accept routes' unit of work on an ``AsyncConnection`` instead
  of an ``AsyncSession`` (what the session's own transaction bookkeeping costs per request;
  ``--only accept``: the status route would check out a connection it does not use).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

KNOWN = (
    "no_gc_freeze",
    "young_gc_2000",
    "asyncio_consumer",
    "accept_on_connection",
    "no_rate_limit",
)


def enabled() -> set[str]:
    names = {n for n in os.environ.get("BENCH_EXPERIMENTS", "").split(",") if n}
    unknown = names - set(KNOWN)
    if unknown:
        raise SystemExit(f"unknown experiments {sorted(unknown)}; known: {', '.join(KNOWN)}")
    return names


def apply(names: set[str]) -> None:
    """Before the application is imported and started."""
    if "no_gc_freeze" in names:
        from relay_core import gctuning

        gctuning.freeze_after_startup = lambda: None
    if "young_gc_2000" in names:
        from relay_core import gctuning

        gctuning.YOUNG_THRESHOLD = 2_000
    if "asyncio_consumer" in names:
        from queue_consumer import main

        main._run_loop = asyncio.run
    if "no_rate_limit" in names:
        from relay_api.limits import service as limits

        async def allow(self: Any, subject: str, limit: Any) -> Any:
            return limits.Decision(True, limit, limit.burst, 0.0, 0.0)

        limits.RateLimiter.take = allow  # type: ignore[method-assign]
    if "accept_on_connection" in names:
        from relay_api import deps
        from relay_api.relay import endpoints

        original = deps.unit_of_work

        @contextlib.asynccontextmanager
        async def on_connection(runtime: Any) -> AsyncIterator[Any]:
            async with original(runtime) as uow:
                # execute / commit / rollback / close: what the accept path asks of a session
                uow._session = await runtime.engine.connect()
                yield uow

        endpoints.unit_of_work = on_connection  # type: ignore[assignment]
