"""``relay-pipeline report``: read → per-transaction lifecycles → tables, summary, page."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession

from relay_pipeline.anomalies.job import find_anomalies, write_anomalies
from relay_pipeline.anomalies.service import Thresholds
from relay_pipeline.history.combined import window_lifecycles
from relay_pipeline.history.repository import ArchiveReader, JdbcReader
from relay_pipeline.history.window import Window, utcnow
from relay_pipeline.progress import Progress
from relay_pipeline.report import costs, page, service
from relay_pipeline.storage import Storage

STEPS = 6
# The tables a report writes (Parquet directories under its --out), as summary.json lists them.
TABLES = (
    "hourly",
    "attempts",
    "failure_reasons",
    "stage_latency",
    "fees_hourly",
    "client_costs",
    "relayer_spend",
    "anomalies",
)


@dataclass(frozen=True)
class ReportRequest:
    window: Window
    out_dir: str
    now: datetime
    thresholds: Thresholds
    anomaly_limit: int = 1000


def describe_inputs(jdbc: JdbcReader | None, archive: ArchiveReader | None) -> dict[str, Any]:
    parts = []
    if jdbc is not None:
        parts.append(jdbc.db.display)
    if archive is not None:
        parts.append(f"archive {archive.path}")
    return {
        "database": jdbc.db.display if jdbc is not None else None,
        "archive": archive.path if archive is not None else None,
        "describe": " + ".join(parts),
    }


def _write(df: DataFrame, path: str) -> DataFrame:
    # One file per table. repartition(1), not coalesce(1): coalesce would pull the whole
    # aggregation into the single writing task (measured: the hourly percentiles on one core,
    # 17 s of a 33 s step at 10 M rows); repartition only moves the small result.
    # Read back with the schema it was written with: Spark would otherwise run a job to read
    # it from the file's footer, once per table.
    df.repartition(1).write.mode("overwrite").parquet(path)
    return df.sparkSession.read.schema(df.schema).parquet(path)


def run_report(
    spark: SparkSession,
    jdbc: JdbcReader | None,
    archive: ArchiveReader | None,
    request: ReportRequest,
    progress: Progress,
) -> dict[str, Any]:
    began = time.monotonic()
    out = request.out_dir.rstrip("/")
    storage = Storage(spark)
    storage.mkdirs(out)

    with progress.step("reading history and event trails"):
        # The database's part is cached in memory; archived dates are read from the lifecycles
        # derived beside the archive (Parquet), by each step, the columns it uses only.
        inputs = window_lifecycles(jdbc, archive, request.window, progress.note)
        per_tx = inputs.rows
        if jdbc is not None:
            progress.note(f"{inputs.read():,} transactions from the database")
    try:
        with progress.step("aggregating transactions per hour"):
            # Groups of whole archived dates come from tables derived beside the archive. The
            # transactions are counted from this table, not by a pass of their own.
            hourly = _write(
                inputs.grouped("hourly", service.hourly, service.GROUP), f"{out}/hourly"
            )
            totals = service.totals(hourly)
            progress.note(f"{totals.accepted:,} transactions")
        with progress.step("attempts, failure reasons, fees, value moved and relayer spend"):
            # One pass over the transactions for the five tables: all are sums of this cube.
            cube = costs.cost_cube(per_tx, outcomes=True).persist(StorageLevel.MEMORY_AND_DISK)
            try:
                attempts = _write(service.attempts_histogram(cube), f"{out}/attempts")
                reasons = _write(service.failure_reasons(cube), f"{out}/failure_reasons")
                paid = costs.paid_cells(cube)
                fees = _write(costs.fees_hourly(paid), f"{out}/fees_hourly")
                client_costs = _write(costs.client_costs(paid), f"{out}/client_costs")
                spend = _write(costs.relayer_spend(paid), f"{out}/relayer_spend")
            finally:
                cube.unpersist()
        with progress.step("stage latency percentiles"):
            stages = _write(service.stage_latency(per_tx), f"{out}/stage_latency")
        with progress.step("anomaly scan"):
            found = find_anomalies(
                per_tx,
                jdbc,
                request.window,
                request.now,
                request.thresholds,
                client_hours=costs.client_hours(fees),
            )
            anomalies = write_anomalies(
                found,
                storage,
                out,
                request.anomaly_limit,
            )
        with progress.step("summary and charts"):
            summary: dict[str, Any] = {
                "window": {
                    "since": request.window.since.isoformat(sep=" "),
                    "until": request.window.until.isoformat(sep=" "),
                },
                "generated_at": utcnow().isoformat(sep=" ", timespec="seconds"),
                "now": request.now.isoformat(sep=" ", timespec="seconds"),
                "inputs": describe_inputs(jdbc, archive),
                "totals": totals.as_dict(),
                "stage_latency_ms": service.stage_summary(stages),
                "top_failure_reasons": service.top_failure_reasons(reasons),
                "attempts_histogram": service.attempts_overall(attempts),
                "throughput_per_hour": service.throughput(hourly),
                "by_client": service.by_client(hourly),
                "costs": {
                    "totals": costs.totals(client_costs),
                    "by_client": costs.by_client(client_costs),
                    "relayer_spend": costs.spend_per_day(spend),
                    "fees_per_hour": costs.fees_per_hour(fees),
                },
                "anomalies": anomalies.as_dict(),
                "tables": {name: f"{name}/" for name in TABLES},
            }
            summary["elapsed_s"] = round(time.monotonic() - began, 2)
            storage.write_text(f"{out}/summary.json", json.dumps(summary, indent=2, default=str))
            storage.write_text(f"{out}/report.html", page.render(summary))
    finally:
        inputs.release()
    return summary


def default_thresholds(
    enqueue_grace_min: float,
    visibility_timeout_s: float,
    processing_grace_s: float,
    stale_inflight_min: float,
    fee_spike_factor: float = 5.0,
    fee_spike_min_hours: int = 12,
) -> Thresholds:
    from datetime import timedelta

    return Thresholds(
        enqueue_grace=timedelta(minutes=enqueue_grace_min),
        processing_timeout=timedelta(seconds=visibility_timeout_s + processing_grace_s),
        stale_inflight=timedelta(minutes=stale_inflight_min),
        fee_spike_factor=fee_spike_factor,
        fee_spike_min_hours=fee_spike_min_hours,
    )
