"""Changes tried from outside, to measure a gain (or a cost) without editing services/ or libs/
(``python -m bench --experiment NAME[,NAME]``; benchmark launchers only).

Each experiment monkeypatches the launched API and consumer processes; results are labelled
with the experiments applied. The ones measured so far, and what they showed, are in
docs/performance.md ("Measured experiments").

- ``no_gc_freeze``: leave CPython's collector as it is (undo ``relay_core.gctuning``), to show
  what freezing the start-up objects buys;
- ``asyncio_consumer``: run the consumer on the standard asyncio loop instead of uvloop.
"""

from __future__ import annotations

import asyncio
import os

KNOWN = ("no_gc_freeze", "asyncio_consumer")


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
    if "asyncio_consumer" in names:
        from queue_consumer import main

        main._run_loop = asyncio.run
