"""Running the scenarios of one benchmark run: the servers started once for the run, then the
ceilings, the consumer scenarios and the API scenarios, each a step whose failure is recorded
rather than raised; ``run_all`` returns the results and the failures."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import (
    api,
    batches,
    ceilings,
    consumer,
    observecost,
    pickup,
    procstat,
    profiling,
)
from bench.infra import ROOT, Run
from bench.scales import SCENARIOS, Scale

RESULTS = ROOT / "bench" / "results"


def _say(line: str) -> None:
    sys.stderr.write(f"[bench {time.strftime('%H:%M:%S')}] {line}\n")
    sys.stderr.flush()


def _git() -> dict[str, Any]:
    def git(*args: str) -> str:
        out = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=False, timeout=10
        )
        return out.stdout.strip()

    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain"))}


Step = Callable[[str, Callable[[], Awaitable[Any]]], Awaitable[Any]]


async def prepare_cases(run: Run, scale: Scale, step: Step) -> list[consumer.Case]:
    """Smoke runs: every consumer scenario's rows and queues ready and its consumers started
    before anything else, so their seconds of imports overlap the ceilings."""
    prepared = []
    for latency_ms, procs in scale.consumer_cases:
        label = f"consumer_{latency_ms}ms_x{procs}"
        case = await step(
            f"{label}.prepare",
            lambda label=label, latency_ms=latency_ms, procs=procs: consumer.prepare(  # type: ignore[misc]
                run,
                label=label,
                latency_ms=latency_ms,
                processes=procs,
                messages=scale.consumer_messages,
                preload=False,
            ),
        )
        if case is not None:
            consumer.spawn(run, case)
            prepared.append(case)
    return prepared


async def consumer_cases(
    run: Run, scale: Scale, step: Step, profile_dir: Path | None, prepared: list[consumer.Case]
) -> list[Any]:
    """Full runs: each scenario prepared (queue preloaded), started and measured in turn.
    Smoke runs: the ``prepared`` ones measured in turn."""

    async def measure(case: consumer.Case) -> Any:
        return await step(
            case.label,
            lambda: consumer.measure(
                run,
                case,
                max_s=scale.consumer_max_s,
                profile_dir=profile_dir if case.processes == 1 else None,
            ),
        )

    results = [await measure(case) for case in prepared]
    if not scale.parallel:
        for latency_ms, procs in scale.consumer_cases:
            label = f"consumer_{latency_ms}ms_x{procs}"
            case = await step(
                f"{label}.prepare",
                lambda label=label, latency_ms=latency_ms, procs=procs: consumer.prepare(  # type: ignore[misc]
                    run,
                    label=label,
                    latency_ms=latency_ms,
                    processes=procs,
                    messages=scale.consumer_messages,
                    preload=True,
                ),
            )
            if case is not None:
                results.append(await measure(case))
    return [result for result in results if result]


async def measure_ceilings(
    run: Run, scale: Scale, step: Step, bare_server: tuple[Any, int] | None = None
) -> dict[str, Any]:
    pollers = consumer.DEFAULT_POLLERS
    sqs_results = []
    for p in sorted({pollers * procs for _, procs in scale.consumer_cases}):
        value = await step(
            f"ceiling.sqs.p{p}",
            lambda p=p: ceilings.sqs_ceiling(run, scale.sqs_messages, p),  # type: ignore[misc]
        )
        if value:
            sqs_results.append(value)
    db_url = run.database("ceiling")
    db_results = []
    for c in scale.db_concurrency:
        value = await step(
            f"ceiling.db.c{c}",
            lambda c=c: ceilings.db_ceiling(db_url, c, scale.db_seconds),  # type: ignore[misc]
        )
        if value:
            db_results.append(value)
    db_latency = await step(
        "ceiling.db.latency",
        lambda: ceilings.db_latency_ceiling(db_url, *scale.db_latency),
    )
    run.drop_database(db_url)
    http = await step(
        "ceiling.http",
        lambda: ceilings.http_ceiling(
            run, scale.http_seconds, scale.http_concurrency, *scale.http_latency, bare_server
        ),
    )
    return {"sqs": sqs_results, "db": db_results, "db_latency": db_latency, "http": http}


async def run_all(args: argparse.Namespace, scale: Scale) -> tuple[dict[str, Any], list[str]]:
    only = set(args.only.split(",")) if args.only else set(SCENARIOS)
    failures: list[str] = []
    profile_dir = RESULTS / "profiles" if args.profile else None
    started = time.perf_counter()
    results: dict[str, Any] = {
        "kind": "profile" if args.profile else "smoke" if args.smoke else "full",
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": procstat.machine() | {"python": platform.python_version()},
        "git": _git(),
        "scale": {k: v for k, v in scale.__dict__.items() if k != "notes"},
        "load_before_scenario": {},
    }
    if not args.smoke:
        results["busy_processes_at_start"] = await asyncio.to_thread(procstat.busy_processes)

    workdir = Path(tempfile.mkdtemp(prefix="relay-bench-"))
    results["workdir"] = str(workdir)
    async with Run.open(workdir, args.sqs) as run:
        results["sqs_server"] = run.sqs_version
        _say(
            f"run {run.run_id}: {run.sqs_version} on {run.sqs.endpoint if run.sqs else '?'}, "
            f"logs in {workdir}"
        )

        async def step(name: str, body: Callable[[], Awaitable[Any]]) -> Any:
            results["load_before_scenario"][name] = procstat.machine()["loadavg"]
            _say(f"{name} ...")
            began = time.perf_counter()
            try:
                value = await body()
            except Exception as exc:
                failures.append(f"{name}: {type(exc).__name__}: {exc}")
                _say(f"{name} FAILED: {exc}")
                traceback.print_exc(file=sys.stderr)
                return None
            _say(f"{name} done in {time.perf_counter() - began:.1f}s")
            return value

        async with contextlib.AsyncExitStack() as stack:
            server: api.ApiServer | None = None
            pickup_consumer = None
            prepared: list[consumer.Case] = []
            bare_server = None
            wants_api = bool(only & {"pickup", "fastlane", "status", "accept", "batch", "fees"})
            if scale.parallel:
                # Smoke: every process the run needs starts now; their imports (seconds of CPU
                # each) overlap the ceilings instead of adding up.
                if wants_api:
                    server = await api.start_api_server(run, "api")
                    stack.push_async_callback(api.stop_api_server, run, server)
                    if "pickup" in only:
                        pickup_consumer = pickup.start_pickup_consumer(run, server)
                if "consumer" in only:
                    prepared = await prepare_cases(run, scale, step)
                if "ceilings" in only:
                    bare_server = ceilings.start_bare_server(run)

            if "ceilings" in only:
                results["ceilings"] = await measure_ceilings(run, scale, step, bare_server)
            if "overhead" in only:
                results["overhead"] = await step(
                    "overhead",
                    lambda: asyncio.to_thread(
                        observecost.measure, 2_000 if args.smoke else 100_000
                    ),
                )
            if "consumer" in only:
                results["consumer"] = await consumer_cases(run, scale, step, profile_dir, prepared)
            if wants_api and server is None:
                server = await api.start_api_server(run, "api")
                stack.push_async_callback(api.stop_api_server, run, server)
            if server is not None and await step("api.start", lambda: server.ready(run)):
                if "pickup" in only:
                    results["pickup"] = await step(
                        "pickup",
                        lambda: pickup.pickup(
                            run,
                            server,
                            samples=scale.pickup[0],
                            rate=scale.pickup[1],
                            consumer=pickup_consumer,
                        ),
                    )
                if "fastlane" in only:
                    backlog, samples, rate = scale.fast_pickup
                    results["fastlane"] = await step(
                        "fastlane",
                        lambda: pickup.fast_pickup(
                            run, server, backlog=backlog, samples=samples, rate=rate
                        ),
                    )
                if "status" in only:
                    results["status"] = await step(
                        "status",
                        lambda: api.status_tiers(
                            run,
                            server,
                            hit=scale.status_hit,
                            miss=scale.status_miss,
                            upstream=scale.status_upstream,
                            profile_dir=profile_dir,
                        ),
                    )
                if "accept" in only:
                    results["accept"] = (
                        await step(
                            "accept",
                            lambda: api.accept_path(
                                run,
                                server,
                                rates=list(scale.accept_rates),
                                duration_s=scale.accept_seconds,
                                warmup_s=scale.accept_warmup_s,
                                profile_dir=profile_dir,
                                profile_rate=scale.profile_rate,
                            ),
                        )
                        or []
                    )
                if "batch" in only:
                    tx_rate, batch_s, batch_rounds = scale.batch
                    results["batch"] = await step(
                        "batch",
                        lambda: batches.batch_sizes(
                            run,
                            server,
                            tx_rate=tx_rate,
                            duration_s=batch_s,
                            rounds=batch_rounds,
                            profile_dir=profile_dir,
                        ),
                    )
                if "fees" in only:
                    rate, seconds, rounds = scale.fees
                    results["fees"] = await step(
                        "fees",
                        lambda: api.fee_budget_cost(
                            run, server, rate=rate, duration_s=seconds, rounds=rounds
                        ),
                    )
    results["load_at_end"] = procstat.machine()["loadavg"]
    results["duration_s"] = round(time.perf_counter() - started, 1)
    results["failures"] = failures
    if profile_dir is not None:
        results["profiles"] = {
            path.stem: profiling.summarize(path) for path in sorted(profile_dir.glob("*.txt"))
        }
    return results, failures
