"""How late the API's event loop runs, and why (benchmark processes only).

A task sleeps ``interval_s`` again and again; the time it wakes late is the loop's lag, which
every request in flight waits too. Beside each lag the process's own CPU time over the same
interval says what held the loop up:

- busy: the process used the CPU for most of the interval (its own code: a collection, a
  burst of work);
- off CPU: it used little of it, so it was waiting for a CPU the other processes had (the
  load generator, MariaDB, the SQS server on the same two cores) or blocked in a system call.

Kept per wall-clock second: the worst lag and its CPU share, so memory stays bounded. The
collector's pauses are timed beside it (``gc.callbacks``): an on-CPU stall that matches one
was the collector.
"""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any
from urllib.parse import parse_qs

from bench.dbcount import send_json

STALL_MS = 20.0  # a lag this long is reported: it is the API's whole p99 budget
BUSY_SHARE = 0.5  # at least this share of the interval on the CPU: busy, else off CPU


class LoopWatch:
    def __init__(self, interval_s: float = 0.005) -> None:
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None
        self.worst: dict[int, tuple[float, float]] = {}  # epoch second -> (lag ms, CPU share)
        self.gc_worst: dict[int, tuple[float, int]] = {}  # epoch second -> (pause ms, gen)
        self._gc_began = 0.0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
            gc.callbacks.append(self._on_gc)

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
            gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_began = time.perf_counter()
            return
        pause_ms = (time.perf_counter() - self._gc_began) * 1000
        second = int(time.time())
        if pause_ms > self.gc_worst.get(second, (0.0, 0))[0]:
            self.gc_worst[second] = (pause_ms, info["generation"])

    async def _run(self) -> None:
        interval = self._interval_s
        while True:
            began, cpu_began = time.perf_counter(), time.process_time()
            await asyncio.sleep(interval)
            wall = time.perf_counter() - began
            lag_ms = (wall - interval) * 1000
            second = int(time.time())
            if lag_ms > self.worst.get(second, (0.0, 0.0))[0]:
                share = (time.process_time() - cpu_began) / wall
                self.worst[second] = (lag_ms, share)

    def reset(self) -> None:
        self.worst.clear()
        self.gc_worst.clear()

    def snapshot(self, since_epoch: float | None = None) -> dict[str, Any]:
        """Seconds (counted from ``since_epoch``) whose worst lag reached STALL_MS. Buckets are
        wall-clock seconds, so they line up with the generator's timeline to within one."""
        start = int(since_epoch) if since_epoch else min(self.worst, default=0)
        stalls = {
            second - start: (round(lag, 1), round(share, 2))
            for second, (lag, share) in sorted(self.worst.items())
            if lag >= STALL_MS and second >= start
        }
        lags = [lag for second, (lag, _) in self.worst.items() if second >= start]
        pauses = {s - start: v for s, v in sorted(self.gc_worst.items()) if s >= start}
        return {
            "max_lag_ms": round(max(lags, default=0.0), 1),
            "max_gc_pause_ms": round(max((p for p, _ in pauses.values()), default=0.0), 1),
            "gc_pauses_over_5ms": {
                s: [round(pause, 1), gen] for s, (pause, gen) in pauses.items() if pause > 5
            },
            "stall_ms": STALL_MS,
            "busy_share": BUSY_SHARE,
            # second -> [worst lag ms, the share of it the process spent on the CPU]
            "busy_seconds": {s: list(v) for s, v in stalls.items() if v[1] >= BUSY_SHARE},
            "off_cpu_seconds": {s: list(v) for s, v in stalls.items() if v[1] < BUSY_SHARE},
        }


class LoopWatchMiddleware:
    """ASGI wrapper: starts a :class:`LoopWatch` with the server's lifespan and serves it at
    ``GET /__bench/loop?since=<epoch seconds>`` and ``POST /__bench/loop/reset``;
    ``POST /__bench/loop/stop`` and ``/start`` stop and start its timer (200 wake-ups a
    second: a CPU measurement of the process at a few requests a second stops it)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.watch = LoopWatch()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            self.watch.start()
        elif scope["type"] == "http" and scope["path"].startswith("/__bench/loop"):
            if scope["path"].endswith("/reset"):
                self.watch.reset()
            elif scope["path"].endswith("/stop"):
                self.watch.stop()
            elif scope["path"].endswith("/start"):
                self.watch.start()
            query = parse_qs(scope.get("query_string", b"").decode())
            since = float(query["since"][0]) if "since" in query else None
            await send_json(send, self.watch.snapshot(since))
            return
        await self.app(scope, receive, send)
