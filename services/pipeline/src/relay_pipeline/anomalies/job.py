"""``relay-pipeline anomalies``, and the anomaly step of the report."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from relay_pipeline.anomalies.service import KINDS, Thresholds, fee_spikes, scan
from relay_pipeline.history.lifecycle import lifecycles
from relay_pipeline.history.repository import JdbcReader
from relay_pipeline.history.window import Window
from relay_pipeline.report import costs
from relay_pipeline.storage import Storage

# Transactions by accept time; a fee spike (no transaction) by its hour and client.
ORDER = ("kind", "created_at", "hour", "client_id", "transaction_id")


@dataclass(frozen=True)
class AnomalyResult:
    counts: dict[str, int]
    items: list[dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        return {"counts": self.counts, "items": self.items}


def open_lifecycles_outside(jdbc: JdbcReader, window: Window) -> DataFrame:
    """Lifecycles of not-yet-finished transactions accepted outside the window: a stuck
    transaction can be of any age."""
    return lifecycles(
        jdbc.open_transactions(exclude=window), jdbc.events_of_open_transactions(exclude=window)
    )


def find_anomalies(
    window_lifecycles: DataFrame,
    jdbc: JdbcReader | None,
    window: Window,
    now: datetime,
    thresholds: Thresholds,
    client_hours: DataFrame | None = None,
) -> DataFrame:
    """Every kind of anomaly. ``client_hours`` (``costs.client_hours``): the window's fees per
    client and hour, when the caller has them already; else summed from the lifecycles."""
    candidates = window_lifecycles
    if jdbc is not None:
        candidates = candidates.unionByName(open_lifecycles_outside(jdbc, window))
    if client_hours is None:
        client_hours = costs.client_hours(costs.cost_cube(window_lifecycles))
    return scan(candidates, now, thresholds).unionByName(fee_spikes(client_hours, now, thresholds))


def subject(item: dict[str, Any]) -> str:
    """What a finding is about: its transaction, or for a fee spike its client and hour."""
    if item["transaction_id"] is not None:
        return str(item["transaction_id"])
    hour = item["hour"]
    if isinstance(hour, str):  # as in summary.json
        hour = datetime.fromisoformat(hour)
    return f"client {item['client_id']}, hour {hour:%Y-%m-%d %H:00}"


def write_anomalies(
    anomalies: DataFrame, storage: Storage, out_dir: str, limit: int
) -> AnomalyResult:
    """Write every anomaly as Parquet; return counts per kind and the first ``limit`` rows."""
    target = f"{out_dir.rstrip('/')}/anomalies"
    # One sorted file. Sorting within a single partition, not orderBy: a global sort first
    # samples its input in a pass of its own, i.e. a second scan of every transaction.
    anomalies.repartition(1).sortWithinPartitions(*ORDER).write.mode("overwrite").parquet(target)
    written = anomalies.sparkSession.read.schema(anomalies.schema).parquet(target)  # no footer job
    counted = {
        row["kind"]: int(row["n"])
        for row in written.groupBy("kind").agg(F.count(F.lit(1)).alias("n")).collect()
    }
    counts = {kind: counted.get(kind, 0) for kind in KINDS}
    items = [
        {
            **row.asDict(),
            **{
                name: row[name].isoformat() if row[name] else None
                for name in ("created_at", "updated_at", "hour")
            },
        }
        for row in written.orderBy(*ORDER).limit(limit).collect()
    ]
    return AnomalyResult(counts=counts, items=items)


def write_anomaly_json(
    storage: Storage, out_dir: str, result: AnomalyResult, meta: dict[str, Any]
) -> None:
    storage.write_text(
        f"{out_dir.rstrip('/')}/anomalies.json",
        json.dumps({**meta, **result.as_dict()}, indent=2, default=str),
    )
