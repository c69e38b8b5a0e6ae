"""The benchmark's event-loop watch tells a loop held up by its own work from one held up
off the CPU (the attribution docs/performance.md relies on for the API's latency tail)."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable
from typing import Any

import pytest

from bench.loopwatch import LoopWatch

# What the watch judges is the process's share of a CPU: only a machine doing nothing else
# lets that share be what the test makes it, so these run alone, after the others.
pytestmark = pytest.mark.solo


def _spin(cpu_s: float) -> None:
    """Hold the loop on the CPU: until the process has used ``cpu_s`` of it."""
    until = time.process_time() + cpu_s
    while time.process_time() < until:
        pass


async def _watched(block: Callable[[], object]) -> dict[str, Any]:
    watch = LoopWatch(interval_s=0.005)
    since = time.time()
    watch.start()
    try:
        await asyncio.sleep(0.05)  # the watch is in its sleep
        block()
        await asyncio.sleep(0.05)  # the watch wakes late and records it
        return watch.snapshot(since)
    finally:
        watch.stop()


async def test_a_loop_held_by_its_own_work_is_busy() -> None:
    seen = await _watched(lambda: _spin(0.08))
    assert seen["max_lag_ms"] >= 60
    assert seen["busy_seconds"]
    assert not seen["off_cpu_seconds"]


async def test_a_loop_held_off_the_cpu_is_not_busy() -> None:
    seen = await _watched(lambda: time.sleep(0.08))  # blocked in a system call
    assert seen["max_lag_ms"] >= 60
    assert seen["off_cpu_seconds"]
    assert not seen["busy_seconds"]


async def test_short_lags_are_not_reported_as_stalls() -> None:
    seen = await _watched(lambda: None)
    assert not seen["busy_seconds"]
    assert not seen["off_cpu_seconds"]


async def test_collector_pauses_are_timed() -> None:
    watch = LoopWatch()
    watch.start()
    try:
        gc.collect()
        assert watch.gc_worst  # the full collection above was seen
    finally:
        watch.stop()
