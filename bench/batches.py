"""The batch scenario against one relay API process (``bench.servers api``): the API's CPU per
transaction for single requests and for batches of 1, 10 and 100 (issue 30), in turn, in the
same process.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

from bench import infra, procstat, profiling
from bench.api import BODY, ApiServer
from bench.infra import Run, check


async def batch_sizes(
    run: Run,
    server: ApiServer,
    *,
    tx_rate: int,
    duration_s: float,
    rounds: int,
    profile_dir: Path | None = None,
) -> dict[str, Any]:
    """Transactions accepted per second and the API's CPU per transaction, offered at
    ``tx_rate`` transactions a second as single requests (``POST /relay/direct``) and as
    batches of 1, 10 and 100 (``POST /relay/batch`` at a tenth and a hundredth of the request
    rate), in turn ``rounds`` times in the same API process (with ``profile_dir``, py-spy on
    the first round of batches of 100)."""
    item = json.loads(BODY)
    shapes = {
        "single": ("/api/v1/relay/direct", BODY, 1),
        **{
            f"batch_{size}": (
                "/api/v1/relay/batch",
                json.dumps({"transactions": [item] * size}),
                size,
            )
            for size in (1, 10, 100)
        },
    }
    # The benchmark's own loop watch wakes the process 200 times a second: stopped while this
    # measures, it is not counted in the idle process nor in any shape.
    await server.loop_watch(False)
    try:
        return await _measure(server, run, shapes, tx_rate, duration_s, rounds, profile_dir)
    finally:
        await server.loop_watch(True)


async def _measure(
    server: ApiServer,
    run: Run,
    shapes: dict[str, tuple[str, str, int]],
    tx_rate: int,
    duration_s: float,
    rounds: int,
    profile_dir: Path | None,
) -> dict[str, Any]:
    measured: dict[str, list[dict[str, float]]] = {shape: [] for shape in shapes}
    # What the process spends with nothing to do (its loop's timers, the publisher's and the
    # sweeper's wake-ups; the loop watch is stopped): at a hundredth of the requests it is
    # a good part of a batch's share, so it is stated apart. It moves with the machine's load,
    # so it is measured again before each round, per second, and taken off each shape for as
    # long as that shape's measurement lasted.
    idle_per_s: list[float] = []
    for round_no in range(rounds):
        before, began = procstat.cpu_seconds(server.process.pid) or 0.0, time.monotonic()
        await asyncio.sleep(duration_s)
        idle = (procstat.cpu_seconds(server.process.pid) or 0.0) - before
        idle_per_s.append(idle / (time.monotonic() - began))
        for shape, (path, body, size) in shapes.items():
            await server.db_counts(reset=True)
            before, began = procstat.cpu_seconds(server.process.pid) or 0.0, time.monotonic()
            spec = server.spec(
                method="POST",
                path=path,
                body=body,
                expect_status=[202],
                rate=max(1, tx_rate // size),
                duration_s=duration_s,
            )
            profiler = None
            if profile_dir is not None and round_no == 0 and shape == "batch_100":
                profiler = profiling.start(server.process.pid, profile_dir / "api-batch-100.txt")
            try:
                result = await infra.run_loadgen(run, spec, f"batch-{shape}-{round_no}")
            finally:
                if profiler is not None:
                    profiling.stop(profiler)
            await asyncio.sleep(0.5)  # the publisher's work after the answers is counted too
            cpu = (procstat.cpu_seconds(server.process.pid) or 0.0) - before
            idle_cpu_s = idle_per_s[-1] * (time.monotonic() - began)
            counts = await server.db_counts()
            accepted = size * int(counts["http_requests"].get(f"POST {path} 202", 0))
            check(
                accepted > 0 and result["error_count"] == 0,
                f"batch ({shape}): {accepted} accepted, errors {result['errors']}",
            )
            measured[shape].append(
                {
                    "accepted_per_s": round(accepted / duration_s, 1),
                    "api_cpu_ms_per_tx": round(1000 * cpu / accepted, 4),
                    "net_cpu_ms_per_tx": round(1000 * (cpu - idle_cpu_s) / accepted, 4),
                }
            )
    medians = {
        shape: {
            name: round(statistics.median(level[name] for level in levels), 4)
            for name in ("accepted_per_s", "api_cpu_ms_per_tx", "net_cpu_ms_per_tx")
        }
        for shape, levels in measured.items()
    }
    # The ratio within each round (its shapes measured minutes apart at most), then the median
    # of those: the machine's speed drifts over a run, and a ratio of medians taken from
    # different rounds would carry that drift into it.
    ratios = [
        round(batched["net_cpu_ms_per_tx"] / single["net_cpu_ms_per_tx"], 4)
        for batched, single in zip(measured["batch_100"], measured["single"], strict=True)
    ]
    single_median = medians["single"]["net_cpu_ms_per_tx"]
    return {
        "tx_rate": tx_rate,
        "duration_s": duration_s,
        "idle_cpu_per_s": [round(idle, 4) for idle in idle_per_s],
        "rounds": measured,
        "median": medians,
        "batch_100_vs_single_per_round": ratios,
        "batch_100_cpu_vs_single": round(statistics.median(ratios), 4),
        "ratio_of_medians": round(medians["batch_100"]["net_cpu_ms_per_tx"] / single_median, 4),
    }
