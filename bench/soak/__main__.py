"""``make soak``: the whole system under steady traffic while a nemesis breaks it, then a
history check (docs/runbook.md, "The soak").

    python -m bench.soak [--minutes 30] [--rate 100] [--results bench/results]

100 direct transactions a second over both lanes go through the API, two consumers, the
relayer-stub in memory mode, MariaDB, Redis and a local SQS server, all on their shipped
defaults, for ``--minutes`` (``SOAK_MINUTES``); a fault starts every one to three minutes
(bench/soak/nemesis.py). Then the traffic stops, every accepted transaction is given up to
ten minutes to end, and the checker reports (bench/soak/history.py). Exit 0 when every count
but the accepted one is 0 and no process that lived through the soak grew by 10 % or more.
Writes ``soak-<time>.json`` and ``.md`` into the results directory.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import procstat
from bench.infra import Run
from bench.soak import client, history, nemesis
from bench.soak.system import CONSUMERS, System
from relay_devstack.localsqs import free_port
from relay_testkit import unfinished
from relay_testkit.tcpproxy import TcpProxy

log = logging.getLogger("bench.soak")
WARM_UP_S = 120  # the memory compared is sampled after this much traffic, and at the end
SETTLE_S = 600


def _say(line: str) -> None:
    sys.stdout.write(f"[{datetime.now(UTC):%H:%M:%S}] {line}\n")
    sys.stdout.flush()


async def _memory(system: System, stop: asyncio.Event, rss: dict[str, dict[str, float]]) -> None:
    """Each process's resident memory after the warm-up, and the last sample before the end,
    for the processes that lived through it all (a restarted one starts its own count)."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), WARM_UP_S)
        return
    first = dict(system.pids())
    for name, pid in first.items():
        rss[name] = {"start": procstat.memory_mb(pid, "VmRSS") or 0.0}
    while not stop.is_set():
        for name, pid in list(first.items()):
            if system.pids().get(name) != pid:  # restarted: no longer the same process
                rss.pop(name, None)
                first.pop(name)
                continue
            rss[name]["end"] = procstat.memory_mb(pid, "VmRSS") or 0.0
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 10)


async def _settle(system: System, ids: set[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        left = len(await asyncio.to_thread(unfinished, system.database_url) & ids)
        if not left:
            return
        _say(f"waiting for {left} transactions to end")
        await asyncio.sleep(10)


async def soak(
    minutes: float, rate: float, results: Path, seed: int, gap_s: tuple[float, float]
) -> history.Report:
    workdir = Path(os.environ.get("SOAK_WORKDIR") or tempfile.mkdtemp(prefix="relay-soak-"))
    run = Run(run_id=uuid.uuid4().hex[:8], workdir=workdir, sqs_kind="ministack")
    run.redis_prefix = f"relaysoak:{run.run_id}:"
    database_url = run.database("soak")
    with TcpProxy(3306) as proxy:
        system = System(
            run=run,
            workdir=workdir,
            database_url=database_url,
            proxy=proxy,
            sqs_port=free_port(),
            queue_name=f"soak-{run.run_id}",
            api_port=free_port(),
        )
        try:
            return await _soak(system, minutes, rate, results, seed, gap_s)
        finally:
            await asyncio.to_thread(system.stop_all)
            await run.close()


async def _soak(
    system: System,
    minutes: float,
    rate: float,
    results: Path,
    seed: int,
    gap_s: tuple[float, float],
) -> history.Report:
    await system.start_sqs()
    await asyncio.to_thread(system.start_stub)
    await asyncio.to_thread(system.start_api)
    key = await asyncio.to_thread(system.client_key)
    for name in CONSUMERS:
        system.start_consumer(name)
    _say(f"soak: {rate:.0f} tx/s for {minutes:g} min; logs in {system.workdir}")

    log_ = client.ClientLog()
    windows: list[nemesis.Window] = []
    rss: dict[str, dict[str, float]] = {}
    stop_traffic, stop_watching = asyncio.Event(), asyncio.Event()
    sender = asyncio.create_task(client.send(system.api_url, key, rate, stop_traffic, log_))
    reader = asyncio.create_task(client.read_statuses(system.api_url, key, stop_watching, log_))
    breaker = asyncio.create_task(
        nemesis.run(
            system,
            stop_traffic,
            windows,
            log_.nemesis_errors,
            random.Random(seed),
            first_after_s=min(60.0, gap_s[0]),
            gap_s=gap_s,
        )
    )
    memory = asyncio.create_task(_memory(system, stop_traffic, rss))
    started = time.monotonic()
    while time.monotonic() - started < minutes * 60:
        await asyncio.sleep(min(30, minutes * 60 - (time.monotonic() - started)))
        faults = ", ".join(w.fault for w in windows[-3:]) or "none yet"
        _say(f"{len(log_.accepted)} accepted; faults so far {len(windows)} (last: {faults})")
    stop_traffic.set()
    await asyncio.gather(sender, breaker, memory)
    _say(f"traffic stopped: {len(log_.accepted)} accepted; settling")
    await _settle(system, {a.transaction_id for a in log_.accepted}, SETTLE_S)
    stop_watching.set()
    await reader
    assert system.stub is not None
    report = await asyncio.to_thread(
        history.check, system.database_url, system.stub.base_url, log_, windows, rss
    )
    _write(report, results, minutes, rate)
    return report


def _write(report: history.Report, results: Path, minutes: float, rate: float) -> None:
    results.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    body: dict[str, Any] = {"minutes": minutes, "rate": rate, **report.as_dict()}
    (results / f"soak-{stamp}.json").write_text(json.dumps(body, indent=2, default=str) + "\n")
    lines = [
        f"# Soak {stamp}: {minutes:g} min at {rate:.0f} tx/s, {len(report.faults)} faults",
        "",
        "| | |",
        "|---|---|",
        *(
            f"| {name} | {getattr(report, name)} |"
            for name in (
                "accepted",
                "executed_once",
                "executed_twice",
                "lost",
                "failed_transient",
                "stuck",
                "reads_backwards",
                "abandoned_by_client",
                "nemesis_errors",
                "status_reads",
                "outside_faults",
                "accept_to_submitted_p50_ms",
                "accept_to_submitted_p99_ms",
            )
        ),
        *(
            f"| RSS {name} (MiB) | {sample.get('start', 0):.0f} → {sample.get('end', 0):.0f} "
            f"({report.rss_growth.get(name, 0):+.1%}) |"
            for name, sample in report.rss_mb.items()
        ),
        "",
        "Faults, in order:",
        "",
        *(f"- {f['start']} {f['fault']} ({f['seconds']:.0f} s)" for f in report.faults),
        "",
        f"Verdict: {'clean' if report.clean else 'NOT clean'}",
        *(f"- {note}" for note in report.notes),
    ]
    (results / f"soak-{stamp}.md").write_text("\n".join(lines) + "\n")
    sys.stdout.write("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument(
        "--minutes", type=float, default=float(os.environ.get("SOAK_MINUTES") or 30)
    )
    parser.add_argument("--rate", type=float, default=100.0, help="transactions per second")
    parser.add_argument("--results", type=Path, default=Path("bench/results"))
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument(
        "--fault-gap",
        default="60,180",
        help="seconds between the starts of two faults, LOW,HIGH (default 60,180)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    low, high = (float(part) for part in args.fault_gap.split(","))
    report = asyncio.run(soak(args.minutes, args.rate, args.results, args.seed, (low, high)))
    return 0 if report.clean else 1


if __name__ == "__main__":
    sys.exit(main())
