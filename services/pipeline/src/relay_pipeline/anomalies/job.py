"""``relay-pipeline anomalies``, and the anomaly step of the report."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from relay_pipeline.anomalies.service import KINDS, Thresholds, scan
from relay_pipeline.history.lifecycle import lifecycles
from relay_pipeline.history.repository import JdbcReader
from relay_pipeline.history.window import Window
from relay_pipeline.storage import Storage


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
) -> DataFrame:
    candidates = window_lifecycles
    if jdbc is not None:
        candidates = candidates.unionByName(open_lifecycles_outside(jdbc, window))
    return scan(candidates, now, thresholds)


def write_anomalies(
    anomalies: DataFrame, storage: Storage, out_dir: str, limit: int
) -> AnomalyResult:
    """Write every anomaly as Parquet; return counts per kind and the first ``limit`` rows."""
    target = f"{out_dir.rstrip('/')}/anomalies"
    # One sorted file. Sorting within a single partition, not orderBy: a global sort first
    # samples its input in a pass of its own, i.e. a second scan of every transaction.
    anomalies.repartition(1).sortWithinPartitions(
        "kind", "created_at", "transaction_id"
    ).write.mode("overwrite").parquet(target)
    written = anomalies.sparkSession.read.parquet(target)
    counted = {
        row["kind"]: int(row["n"])
        for row in written.groupBy("kind").agg(F.count(F.lit(1)).alias("n")).collect()
    }
    counts = {kind: counted.get(kind, 0) for kind in KINDS}
    items = [
        {
            **row.asDict(),
            "created_at": row["created_at"].isoformat() if row["created_at"] else None,
            "updated_at": row["updated_at"].isoformat() if row["updated_at"] else None,
        }
        for row in written.orderBy("kind", "created_at", "transaction_id").limit(limit).collect()
    ]
    return AnomalyResult(counts=counts, items=items)


def write_anomaly_json(
    storage: Storage, out_dir: str, result: AnomalyResult, meta: dict[str, Any]
) -> None:
    storage.write_text(
        f"{out_dir.rstrip('/')}/anomalies.json",
        json.dumps({**meta, **result.as_dict()}, indent=2, default=str),
    )
