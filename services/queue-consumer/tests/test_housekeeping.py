"""The background jobs' loop: a pass that did a whole batch goes again at once, others wait."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter

import pytest

from queue_consumer.housekeeping import every


@pytest.mark.parametrize(
    ("full", "passes_at_once"),
    [(5, 3), (10, 1), (1, 4)],  # full=1: again while it does anything, as it was
)
async def test_a_job_goes_again_at_once_only_after_a_whole_batch(
    full: int, passes_at_once: int
) -> None:
    done = iter([5, 5, 4, 0, 9])
    calls = 0

    async def job() -> int:
        nonlocal calls
        calls += 1
        return next(done)

    counts: Counter[str] = Counter()
    loop = asyncio.create_task(every(60.0, job, "job", counts, full=full))
    await asyncio.sleep(0.2)  # far less than the interval: only the passes at once ran
    loop.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await loop
    assert calls == passes_at_once
    assert counts["job_done"] == sum([5, 5, 4, 0][:passes_at_once])
