"""Every figure of a run's results as a row of the table printed after it, scenario kind by
scenario kind: the ceilings and the overhead here, the others from their own modules
(bench.consumer_rows, bench.api_rows)."""

from __future__ import annotations

from typing import Any

from bench.api_rows import accept_rows, batch_rows, fee_rows, pickup_rows, status_rows
from bench.consumer_rows import consumer_rows
from bench.table import Row, lookup


def rows(results: dict[str, Any], smoke: bool) -> list[Row]:
    """Every figure with its same-run ceiling; ``passed`` is None in smoke runs (no thresholds)
    and where the issue sets no target."""
    out: list[Row] = []
    judge = (lambda ok: None) if smoke else (lambda ok: bool(ok))
    ceilings = results.get("ceilings", {})
    sqs = {c["pollers"]: c for c in ceilings.get("sqs", [])}
    db = {c["concurrency"]: c for c in ceilings.get("db", [])}
    http = ceilings.get("http") or {}
    sqs_name = results.get("sqs_server", "SQS")
    for pollers, c in sorted(sqs.items()):
        out.append(
            Row(
                "ceiling",
                f"{sqs_name} receive(10)+DeleteMessageBatch, {pollers} pollers",
                c["rate"],
                "msg/s",
            )
        )
    for concurrency, c in sorted(db.items()):
        out.append(
            Row(
                "ceiling",
                f"MariaDB INSERT+COMMIT, {concurrency} connection(s)",
                c["rate"],
                "rows/s",
            )
        )
    db_latency = ceilings.get("db_latency") or {}
    if db_latency:
        lat = db_latency["latency_ms"]
        out.append(
            Row(
                "ceiling",
                f"MariaDB INSERT+COMMIT latency p50 / p99 / max at {db_latency['rate']}/s, "
                f"{db_latency['connections']} connections (open loop)",
                f"{lat['p50']} / {lat['p99']} / {lat['max']}",
                "ms",
            )
        )
    if http:
        out.append(
            Row(
                "ceiling",
                "bare FastAPI/uvicorn endpoint, 1 worker (closed loop)",
                http["rate"],
                "req/s",
            )
        )
        lat = http["latency_at_rate"]
        out.append(
            Row(
                "ceiling",
                f"bare endpoint latency p50 / p99 at {lat['offered_rate']} req/s",
                f"{lat['latency_ms']['p50']} / {lat['latency_ms']['p99']}",
                "ms",
            )
        )
    overhead = results.get("overhead") or {}
    if overhead:
        out.append(
            Row(
                "overhead",
                "metrics + request id + trace, CPU per API request (in a loop, no I/O)",
                overhead["request_overhead_us"],
                "µs",
            )
        )
        out.append(
            Row(
                "overhead",
                "metrics + trace, CPU per consumer message (in a loop, no I/O)",
                overhead["message_overhead_us"],
                "µs",
            )
        )
        out.append(
            Row(
                "overhead", "one /metrics scrape of the API's registry", overhead["scrape_ms"], "ms"
            )
        )
    floor_p99 = lookup(http, "latency_at_rate", "latency_ms", "p99")

    out.extend(consumer_rows(results.get("consumer", []), sqs, judge))
    out.extend(accept_rows(results.get("accept", []), http, db_latency, judge))
    out.extend(batch_rows(results.get("batch"), judge))
    out.extend(fee_rows(results.get("fees"), judge))
    out.extend(status_rows(results.get("status") or {}, floor_p99, judge))
    out.extend(pickup_rows(results.get("pickup"), results.get("fastlane"), judge))
    return out
