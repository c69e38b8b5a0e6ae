"""Real consumer processes: throughput with two of them, SIGKILL, crash after submit, SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from consumer_testkit import (
    Stub,
    process_env,
    queue_depth,
    rows,
    seed_rows,
    send_messages,
    status_counts,
    wait_until,
)


def _exactly_once(stub: Stub, database_url: str, expected: int) -> None:
    count, entries = stub.ledger()
    assert count == expected, f"executor got {count} submissions for {expected} transactions"
    per_data = Counter(entry["data"] for entry in entries)
    assert max(per_data.values()) == 1, "a transaction was submitted twice"
    recorded = {r["executor_tx_id"] for r in rows(database_url) if r["executor_tx_id"]}
    assert recorded == {entry["id"] for entry in entries}


@pytest.mark.stress
@pytest.mark.timeout(600)
async def test_one_thousand_transactions_through_two_consumer_processes(
    database_url: str, sqs: Any, queues: tuple[str, str], stub: Stub, spawn_consumer: Any
) -> None:
    ids = seed_rows(database_url, 1000)
    await send_messages(sqs, queues[0], ids)
    spawn_consumer(0)
    spawn_consumer(1)
    await wait_until(
        lambda: status_counts(database_url) == {"submitted": 1000}, 500, "1000 submitted"
    )
    _exactly_once(stub, database_url, 1000)
    await wait_until(lambda: _depth_zero(sqs, queues[0]), 30, "work queue empty")
    assert await queue_depth(sqs, queues[1]) == 0


async def _depth_zero(sqs: Any, url: str) -> bool:
    return await queue_depth(sqs, url) == 0


async def test_sigkill_mid_batch_then_a_new_consumer_loses_nothing_and_repeats_nothing(
    database_url: str, sqs: Any, queues: tuple[str, str], stub: Stub, spawn_consumer: Any
) -> None:
    stub.faults(latency={"dist": "uniform", "min_ms": 100, "max_ms": 400}, scope="submit")
    ids = seed_rows(database_url, 200)
    await send_messages(sqs, queues[0], ids)
    first = spawn_consumer(0, consumer_concurrency=40)
    await wait_until(lambda: stub.ledger_count() >= 40, 60, "first consumer under way")
    first.send_signal(signal.SIGKILL)
    first.wait()
    in_flight = status_counts(database_url).get("processing", 0)
    assert in_flight > 0, "the kill should land mid-batch"

    spawn_consumer(1)
    await wait_until(
        lambda: status_counts(database_url) == {"submitted": 200}, 120, "all 200 submitted"
    )
    _exactly_once(stub, database_url, 200)
    await wait_until(lambda: _depth_zero(sqs, queues[0]), 30, "work queue empty")


async def test_crash_right_after_the_executor_answered_is_reconciled_not_resubmitted(
    database_url: str, sqs: Any, queues: tuple[str, str], stub: Stub, spawn_consumer: Any
) -> None:
    ids = seed_rows(database_url, 1)
    await send_messages(sqs, queues[0], ids)
    # Fault injection exists in development only.
    crashing = spawn_consumer(
        0, environment="dev", extra_env={"RELAY_CONSUMER_FAULT": "exit-after-submit"}
    )
    assert crashing.wait(60) == 70  # died between the executor's answer and the record
    assert stub.ledger_count() == 1
    assert status_counts(database_url) == {"processing": 1}

    spawn_consumer(3)
    await wait_until(lambda: status_counts(database_url) == {"submitted": 1}, 60, "adopted")
    _exactly_once(stub, database_url, 1)


async def test_sigterm_finishes_in_flight_work_and_exits_zero_within_the_grace_period(
    database_url: str,
    sqs: Any,
    queues: tuple[str, str],
    stub: Stub,
    spawn_consumer: Any,
    tmp_path: Path,
) -> None:
    stub.faults(latency={"dist": "fixed", "ms": 1500}, scope="submit")
    ids = seed_rows(database_url, 100)
    await send_messages(sqs, queues[0], ids)
    consumer = spawn_consumer(0, consumer_concurrency=20, consumer_grace_s=10, executor_timeout_s=5)
    await wait_until(lambda: status_counts(database_url).get("processing", 0) >= 10, 30, "busy")
    started = time.monotonic()
    consumer.send_signal(signal.SIGTERM)
    assert consumer.wait(15) == 0
    assert time.monotonic() - started < 10
    counts = status_counts(database_url)
    assert counts.get("processing", 0) == 0, counts  # every claimed message was finished
    assert counts["submitted"] >= 10
    assert counts["submitted"] + counts.get("pending", 0) == 100
    _exactly_once(stub, database_url, counts["submitted"])
    log = (tmp_path / "consumer-0.log").read_text()
    assert '"event":"consumer.stopped"' in log
    # The rest stay queued for the next consumer: nothing was lost.
    assert await queue_depth(sqs, queues[0]) == counts.get("pending", 0)


def test_check_command_reports_health_from_the_heartbeat_file(tmp_path: Path) -> None:
    heartbeat = tmp_path / "hb"
    env = process_env({"consumer_heartbeat_file": str(heartbeat), "environment": "test"})

    def check() -> int:
        return subprocess.run(
            [sys.executable, "-m", "queue_consumer.main", "--check"],
            env=env,
            timeout=30,
            capture_output=True,
        ).returncode

    assert check() == 1
    heartbeat.write_text("now")
    assert check() == 0
    old = time.time() - 120
    os.utime(heartbeat, (old, old))
    assert check() == 1


def test_fault_injection_is_off_outside_development(consumer_settings: Any) -> None:
    from queue_consumer.stages.submitting import Submitter

    for environment, fault in (("test", ""), ("production", ""), ("dev", "exit-after-submit")):
        settings = consumer_settings.model_copy(update={"environment": environment})
        os.environ["RELAY_CONSUMER_FAULT"] = "exit-after-submit"
        try:
            submitter = Submitter(settings, *[None] * 4)  # type: ignore[arg-type]
        finally:
            del os.environ["RELAY_CONSUMER_FAULT"]
        assert submitter._fault == fault, environment
