"""The consumer scenarios' rows of the results table: throughput against the same-run SQS
ceiling (or what the concurrency allows against the executor's latency), CPU per 1,000
messages, peak RSS, I/O calls per message, and the default concurrency's bound."""

from __future__ import annotations

from typing import Any

from bench.table import Judge, Row, lookup
from bench.targets import (
    CONSUMER_200MS_MSGS,
    CONSUMER_CPU_S_PER_1000,
    CONSUMER_SHARE_OF_EXPECTED,
    CONSUMER_SHARE_OF_SQS,
    EXECUTOR_LATENCY_S,
    ONE_PROCESS_MSGS,
)


def consumer_rows(
    consumers: list[dict[str, Any]], sqs: dict[int, dict[str, Any]], judge: Judge
) -> list[Row]:
    """Each consumer scenario's rows; ``sqs`` the SQS ceilings by number of pollers."""
    out: list[Row] = []
    for c in consumers:
        procs = c["processes"]
        pollers = c["settings"]["pollers"] * procs
        ceiling = lookup(sqs, pollers, "rate")
        name = f"consumer, executor {c['executor_latency_ms']} ms, {procs} process(es)"
        if c["executor_latency_ms"] == 0:
            target, ok = "", None
            if procs == 1:
                target = f">= {CONSUMER_SHARE_OF_SQS:.0%} of SQS ceiling"
                ok = judge(ceiling and c["rate"] >= CONSUMER_SHARE_OF_SQS * ceiling)
            out.append(
                Row(
                    name,
                    "messages/s (10-90 % window)",
                    c["rate"],
                    "msg/s",
                    ceiling,
                    f"SQS, {pollers} pollers",
                    target,
                    ok,
                )
            )
        else:
            expected = procs * c["settings"]["concurrency"] / (c["executor_latency_ms"] / 1000)
            bound = min(expected, ceiling) if ceiling else expected
            target, ok = "", None
            if procs == 1:
                target = (
                    f">= {CONSUMER_SHARE_OF_EXPECTED:.0%} of min(concurrency/0.2 s, SQS); "
                    f">= {CONSUMER_200MS_MSGS:,} msg/s (issue 18)"
                )
                ok = judge(
                    c["rate"] >= CONSUMER_SHARE_OF_EXPECTED * bound
                    and c["rate"] >= CONSUMER_200MS_MSGS
                )
            out.append(
                Row(
                    name,
                    "messages/s (10-90 % window)",
                    c["rate"],
                    "msg/s",
                    bound,
                    f"min({expected:.0f} = concurrency/latency, SQS)",
                    target,
                    ok,
                )
            )
        out.append(
            Row(
                name,
                "CPU seconds per 1,000 messages (consumer processes)",
                c["cpu_s_per_1000"],
                "s",
                None,
                "",
                f"<= {CONSUMER_CPU_S_PER_1000:g} s (issue 18)" if procs == 1 else "",
                judge(c["cpu_s_per_1000"] <= CONSUMER_CPU_S_PER_1000) if procs == 1 else None,
            )
        )
        out.append(
            Row(
                name,
                "peak RSS per process",
                " / ".join(f"{v:.0f}" for v in c["peak_rss_mb"] if v),
                "MiB",
            )
        )
        io = c.get("io_per_message")
        if io:
            out.append(
                Row(
                    name,
                    "per message: DB round trips / SQS calls / Redis commands / executor HTTP",
                    f"{io['db']} / {io['sqs']} / {io['redis']} / {io['executor_http']}",
                )
            )
        if c["executor_latency_ms"] and procs == 1:
            concurrency = c["settings"]["concurrency"]
            out.append(
                Row(
                    "consumer default concurrency",
                    "concurrency / 0.2 s",
                    concurrency / EXECUTOR_LATENCY_S,
                    "msg/s",
                    None,
                    "",
                    f">= {ONE_PROCESS_MSGS} when the ceiling allows",
                    judge(concurrency / EXECUTOR_LATENCY_S >= ONE_PROCESS_MSGS),
                )
            )
    return out
