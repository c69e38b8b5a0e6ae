"""Consumer throughput: N rows and messages preloaded (bypassing the API), then one or more
``queue_consumer.main`` processes drain the queue against the relayer-stub.

Progress is what SQS still holds (visible + in flight + delayed), read four times a second, so
a message counts once it is deleted: the same unit as the SQS ceiling. The rate is taken from
10 % of the work done to 90 % (drained) or to the end (stopped after ``max_s``), so start-up
and tail are left out; CPU seconds of every process involved are read from /proc over the same
window. Afterwards every executor send must belong to exactly one row (exactly once), and a
drained run must have every row submitted.

Full runs preload the queue, then start the consumers (as the SQS ceiling starts with a full
queue). Smoke runs start every scenario's consumers up front, so their seconds of imports
overlap, and send the messages once the consumers poll; progress is then sent - remaining.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from bench import infra, procstat, profiling, seed, stub
from bench.infra import Run, check
from bench.measure import Sampler
from queue_consumer.settings import ConsumerSettings

DEFAULT_POLLERS = int(ConsumerSettings.model_fields["consumer_pollers"].default)
DEFAULT_CONCURRENCY = int(ConsumerSettings.model_fields["consumer_concurrency"].default)


def status_counts(database_url: str) -> dict[str, int]:
    engine = create_engine(infra.sync_url(database_url))
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT status, COUNT(*) FROM transactions GROUP BY status"))
            counts = {str(status): int(n) for status, n in rows}
            executed = conn.execute(
                text("SELECT COUNT(*) FROM transactions WHERE executor_tx_id IS NOT NULL")
            ).scalar_one()
            in_doubt = conn.execute(
                text(
                    "SELECT COUNT(*) FROM transactions "
                    "WHERE executor_tx_id IS NULL AND submit_started_at IS NOT NULL"
                )
            ).scalar_one()
    finally:
        engine.dispose()
    return counts | {"_with_executor_id": int(executed), "_in_doubt": int(in_doubt)}


def executor_address(label: str) -> str:
    """A ``to`` address per scenario, so each one's sends can be told apart in the ledger."""
    return "0x" + hashlib.sha256(label.encode()).hexdigest()[:40]


@dataclass
class Case:
    label: str
    latency_ms: int
    processes: int
    messages: int
    database_url: str
    queue_name: str
    queue_url: str
    dlq_url: str
    to: str
    ids: list[str]
    preloaded: bool
    consumers: list[Any] = field(default_factory=list)


async def prepare(
    run: Run, *, label: str, latency_ms: int, processes: int, messages: int, preload: bool
) -> Case:
    """Scratch database with ``messages`` pending rows and empty queues; the messages too if
    ``preload``."""
    to = executor_address(label)
    database_url = run.database(label)
    queue_name = f"bench-{run.run_id}-{label}"
    # Under --spend-policy the rows' client has the API's policy (its destination allowed,
    # 1 wei each, a daily budget with ``budget``): the consumer checks it again before each
    # submission, as it does in production.
    policy = os.environ.get("BENCH_SPEND_POLICY")
    client_id = seed.create_client(database_url, name="seed", spend_policy=policy, allowed_to=to)
    async with run.sqs_client(queue_name) as sqs:
        queue_url, dlq_url = await run.create_queues(sqs, queue_name)
        # Rows enqueued after their queue exists, as the API's are: one enqueued before it
        # would be enqueued again by a consumer's first look (relay_core.reconcile).
        await asyncio.sleep(1.0)  # (a queue's creation time is kept in whole seconds)
        ids = seed.seed_rows(
            database_url, messages, client_id=client_id, to=to, value="1" if policy else "0"
        )
        if preload:
            await seed.send_messages(sqs, queue_url, ids)
            check(
                await seed.queue_remaining(sqs, queue_url) == messages,
                f"{label}: preload did not land",
            )
    return Case(
        label,
        latency_ms,
        processes,
        messages,
        database_url,
        queue_name,
        queue_url,
        dlq_url,
        to,
        ids,
        preload,
    )


SETTINGS = {
    # The tracker and notifier are separate loops with their own schedules; with the
    # executor's lifecycle paused they would only add noise to the message path.
    "tracker_enabled": "false",
    "notify_enabled": "false",
    # The in-flight limit is sized to what the executor serves at once (the OZ Relayer: 100,
    # its default). The relayer-stub serves any number, so it is the consumer's concurrency
    # here, and the 200 ms case measures the consumer rather than a cap of 100 / 0.2 s.
    "executor_max_in_flight": str(DEFAULT_CONCURRENCY),
}


def spawn(run: Run, case: Case) -> None:
    case.consumers = [
        run.spawn_consumer(case.database_url, case.queue_name, i, **SETTINGS)
        for i in range(case.processes)
    ]


async def measure(
    run: Run, case: Case, *, max_s: float, profile_dir: Path | None = None
) -> dict[str, Any]:
    """Run ``case`` until drained or ``max_s`` after the first message is done."""
    assert run.stub is not None
    label, messages = case.label, case.messages
    profilers: list[Any] = []
    sender: asyncio.Task[None] | None = None
    try:
        await stub.stub_configure(run.stub, case.latency_ms)
        async with run.sqs_client(case.queue_name) as sqs:
            sent = [messages if case.preloaded else 0]
            if not case.preloaded:
                for index, process in enumerate(case.consumers):
                    await run.wait_consumer_polling(case.queue_name, index, process)
            started = time.perf_counter()
            if not case.consumers:
                spawn(run, case)
            pids = {f"consumer-{i}": p.pid for i, p in enumerate(case.consumers)}
            sampler = Sampler(pids | run.server_pids())
            sampler.take(0)
            if not case.preloaded:
                sender = asyncio.create_task(
                    seed.send_messages(sqs, case.queue_url, case.ids, progress=sent)
                )
            first_progress: float | None = None
            done = 0
            while done < messages:
                await asyncio.sleep(0.25)
                already_sent = sent[0]
                done = max(0, already_sent - await seed.queue_remaining(sqs, case.queue_url))
                sampler.take(done)
                now = time.perf_counter()
                if done and first_progress is None:
                    first_progress = now
                    if profile_dir is not None:  # past start-up: profile the steady state
                        profilers = [
                            profiling.start(p.pid, profile_dir / f"{label}-consumer-{i}.txt")
                            for i, p in enumerate(case.consumers)
                        ]
                for process in case.consumers:
                    check(process.poll() is None, f"{label}: a consumer exited early")
                if first_progress is None:
                    check(now - started < 90, f"{label}: no message done in 90 s")
                elif now - first_progress > max_s:
                    break
            drained = done >= messages
            finished = time.perf_counter()
            if sender is not None:
                await sender
            peak_rss = [procstat.memory_mb(p.pid) for p in case.consumers]
            for profiler in profilers:
                profiling.stop(profiler)
            codes = await asyncio.gather(*(run.stop_async(p, 120) for p in case.consumers))
            check(all(code == 0 for code in codes), f"{label}: consumer exit codes {codes}")
            dead_lettered = await seed.queue_remaining(sqs, case.dlq_url)
            await sqs.delete_queue(QueueUrl=case.queue_url)
            await sqs.delete_queue(QueueUrl=case.dlq_url)
        io = io_counts(run, case)
        counts = status_counts(case.database_url)
        ledger = await stub.stub_ledger(run.stub, to=case.to)
        executed = len(ledger)
        sends_per_row = Counter(entry["data"] for entry in ledger)
        duplicated = {data: n for data, n in sends_per_row.items() if n > 1}
        submitted = counts.get("submitted", 0)
        in_doubt = counts["_in_doubt"]
        check(dead_lettered == 0, f"{label}: {dead_lettered} messages dead-lettered")
        # Exactly once: no transaction (calldata) was sent to the executor twice, and every
        # send is recorded on its row or is an attempt still in doubt (settled by a later
        # delivery; only possible when the run was stopped before the queue drained).
        check(not duplicated, f"{label}: executed more than once: {list(duplicated.items())[:5]}")
        check(
            counts["_with_executor_id"] <= executed <= counts["_with_executor_id"] + in_doubt,
            f"{label}: executor has {executed} sends; rows: {counts['_with_executor_id']} "
            f"with an executor id, {in_doubt} in doubt",
        )
        if drained:
            check(
                submitted == messages and executed == messages,
                f"{label}: {submitted} submitted, {executed} executed of {messages}: {counts}",
            )
        window = sampler.window(done, 0.1, 0.9 if drained else 1.0)
        cpu_s: dict[str, float] = window["cpu_s"]  # type: ignore[assignment]
        consumer_cpu = sum(v for k, v in cpu_s.items() if k.startswith("consumer"))
        window_messages = max(int(window["messages"]), 1)  # type: ignore[call-overload]
        return {
            "label": label,
            "processes": case.processes,
            "executor_latency_ms": case.latency_ms,
            "messages": messages,
            "preloaded": case.preloaded,
            "done": done,
            "drained": drained,
            "rate": window["rate"],
            "window": window,
            "total_s": round(finished - started, 2),
            "startup_s": round((first_progress or finished) - started, 2),
            "cpu_s_per_1000": round(1000 * consumer_cpu / window_messages, 3),
            "other_cpu_s_per_1000": {
                k: round(1000 * v / window_messages, 3)
                for k, v in cpu_s.items()
                if not k.startswith("consumer")
            },
            "peak_rss_mb": [round(v, 1) if v else None for v in peak_rss],
            "settings": {
                "pollers": DEFAULT_POLLERS,
                "concurrency": DEFAULT_CONCURRENCY,
                **SETTINGS,
            },
            "rows": {k: v for k, v in counts.items() if not k.startswith("_")},
            "rows_in_doubt_at_stop": in_doubt,
            "executor_sends": executed,
            "actions": consumer_actions(run, case.queue_name, case.processes),
            "io": io,
            "io_per_message": io_per_message(io, done),
        }
    finally:
        if sender is not None and not sender.done():
            sender.cancel()
        for profiler in profilers:
            profiling.stop(profiler)
        for process in case.consumers:
            if process.poll() is None:
                process.kill()
        run.drop_database(case.database_url)


def io_counts(run: Run, case: Case) -> dict[str, dict[str, int]]:
    """The consumers' I/O calls over their whole life (bench.servers consumer), summed."""
    total: dict[str, Counter[str]] = {}
    for index in range(case.processes):
        path = run.counts_file(case.queue_name, index)
        check(path.exists(), f"{case.label}: consumer {index} wrote no I/O counts")
        for kind, values in json.loads(path.read_text()).items():
            total.setdefault(kind, Counter()).update(values)
    return {kind: dict(values) for kind, values in total.items()}


def io_per_message(io: dict[str, dict[str, int]], done: int) -> dict[str, float]:
    """Calls per message done (whole process life: start-up and drain included)."""

    def per(kind: str, exclude: tuple[str, ...] = ()) -> float:
        calls = sum(n for k, n in io.get(kind, {}).items() if not k.startswith(exclude))
        return round(calls / max(done, 1), 2)

    return {
        "db": per("db"),
        "sqs": per("sqs", ("ReceiveMessage.",)),
        "redis": per("redis", ("PIPELINE.",)),  # round trips: a pipeline counts once
        "executor_http": per("executor_http"),
    }


def consumer_actions(run: Run, queue_name: str, processes: int) -> dict[str, int]:
    """What the consumers logged per message (action/plan), from their JSON logs."""
    counts: Counter[str] = Counter()
    for index in range(processes):
        path = run.workdir / f"consumer-{queue_name}-{index}.log"
        with contextlib.suppress(OSError):
            for line in path.read_text().splitlines():
                if '"consumer.message.handled"' not in line:
                    continue
                with contextlib.suppress(ValueError):
                    entry = json.loads(line)
                    counts[f"{entry.get('action')}/{entry.get('plan')}"] += 1
    return dict(counts)
