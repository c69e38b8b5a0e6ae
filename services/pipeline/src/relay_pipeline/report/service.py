"""The SLA report: per hour × type × speed × client counts, stage latency percentiles, attempts,
failure reasons and dead letters, over transactions accepted in a window.

Percentiles use the nearest-rank definition: the smallest sample with at least p of the samples
at or below it, i.e. the sample of rank ⌈p·n⌉, and they are exact. Per group (hourly table) each
group's samples are collected and sorted, which for the small groups of an hour × type × speed ×
client costs less than a sketch per group. Over the whole window (stage latency) the sample of
that rank is found in two passes (``report.percentiles``): the answer does not depend on the
order the rows come in, so a report from the archive and one from the database agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from relay_pipeline.history.lifecycle import STAGES
from relay_pipeline.report.percentiles import ranked_percentiles

GROUP = ("hour", "type", "speed", "client_id")
PERCENTILES = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))
# The same percentiles in units of 1/10 000, so a rank is computed in integers.
_PER_10K = {label: round(p * 10_000) for label, p in PERCENTILES}
TOP_REASONS = 10


def _count_status(status: str) -> Column:
    return F.sum((F.col("status") == status).cast("long"))


def nearest_rank(sorted_samples: Column, label: str) -> Column:
    """The nearest-rank percentile ``label`` of an ascending array: its element ⌈p·n⌉ (1-based);
    NULL for an empty array. The rank is integer arithmetic: ⌈k·n / 10 000⌉ for p = k / 10 000
    (the float product p·n can land just above a whole number and round the rank up)."""
    n = F.size(sorted_samples)
    rank = F.floor((F.lit(_PER_10K[label]) * n + F.lit(9_999)) / F.lit(10_000)).cast("int")
    return F.when(n > 0, F.element_at(sorted_samples, rank))


def _success_rate(confirmed: Column, failed: Column, expired: Column) -> Column:
    finished = confirmed + failed + expired
    return F.when(finished > 0, F.round(confirmed / finished, 6))


def hourly(lifecycles: DataFrame) -> DataFrame:
    """The main table: one row per hour × type × speed × client."""
    # collect_list skips NULLs: a stage the transaction never reached is not a sample.
    stage_aggs = [F.array_sort(F.collect_list(name)).alias(f"_{name}") for name, _, _ in STAGES]
    grouped = lifecycles.groupBy(*GROUP).agg(
        F.count(F.lit(1)).alias("accepted"),
        F.sum(F.col("reached_submitted").cast("long")).alias("submitted"),
        _count_status("confirmed").alias("confirmed"),
        _count_status("failed").alias("failed"),
        _count_status("expired").alias("expired"),
        _count_status("canceled").alias("canceled"),
        F.sum(F.col("dead_lettered").cast("long")).alias("dead_lettered"),
        *stage_aggs,
    )
    columns: list[Column | str] = [
        *GROUP,
        "accepted",
        "submitted",
        "confirmed",
        "failed",
        "expired",
        "canceled",
        "dead_lettered",
        _success_rate(F.col("confirmed"), F.col("failed"), F.col("expired")).alias("success_rate"),
    ]
    for name, _, _ in STAGES:
        for label, _ in PERCENTILES:
            columns.append(nearest_rank(F.col(f"_{name}"), label).alias(f"{name}_{label}_ms"))
    return grouped.select(*columns)


def attempts_histogram(outcomes: DataFrame) -> DataFrame:
    """How many transactions took each number of executor attempts, per group, from counts of
    transactions per group × attempts × status × failure reason (``costs.cost_cube`` with
    ``outcomes``: a few rows per group, built in the pass that counts the costs)."""
    return outcomes.groupBy(*GROUP, "attempts").agg(F.sum("transactions").alias("transactions"))


def failure_reasons(outcomes: DataFrame) -> DataFrame:
    """Failed and expired transactions by reason, per group."""
    return (
        outcomes.where(F.col("failure_reason").isNotNull())
        .groupBy(*GROUP, "status", F.col("failure_reason").alias("reason"))
        .agg(F.sum("transactions").alias("transactions"))
    )


def stage_latency(lifecycles: DataFrame) -> DataFrame:
    """Stage percentiles over the whole window (type and speed "all"), exact nearest-rank like
    the hourly table's and the same whatever order the rows come in (``report.percentiles``;
    computed here, two passes over ``lifecycles``). Per type × speed × client and hour they are
    in the hourly table."""
    names = [name for name, _, _ in STAGES]
    ranked = ranked_percentiles(
        lifecycles, names, [(label, _PER_10K[label]) for label, _ in PERCENTILES]
    )
    # Literal rows on the JVM's side (spark.range): a DataFrame made from Python rows would
    # need Python on the executors, which a cluster's need not have.
    one = lifecycles.sparkSession.range(1)
    rows = [
        one.select(
            F.lit("all").alias("type"),
            F.lit("all").alias("speed"),
            F.lit(name).alias("stage"),
            F.lit(ranked[name].samples).cast("long").alias("samples"),
            *(
                F.lit(ranked[name].values[label]).cast("double").alias(f"{label}_ms")
                for label, _ in PERCENTILES
            ),
        )
        for name in names
    ]
    return reduce(DataFrame.unionByName, rows)


def top_failure_reasons(reasons: DataFrame, limit: int = TOP_REASONS) -> list[dict[str, Any]]:
    """Most frequent reasons first; ties in reason order, so the ranking is stable."""
    rows = (
        reasons.groupBy("reason")
        .agg(F.sum("transactions").alias("transactions"))
        .orderBy(F.desc("transactions"), F.asc("reason"))
        .limit(limit)
        .collect()
    )
    return [
        {"rank": rank, "reason": row["reason"], "transactions": int(row["transactions"])}
        for rank, row in enumerate(rows, 1)
    ]


@dataclass(frozen=True)
class Totals:
    accepted: int
    submitted: int
    confirmed: int
    failed: int
    expired: int
    canceled: int
    dead_lettered: int

    @property
    def success_rate(self) -> float | None:
        finished = self.confirmed + self.failed + self.expired
        return round(self.confirmed / finished, 6) if finished else None

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "success_rate": self.success_rate}


COUNTS = ("accepted", "submitted", "confirmed", "failed", "expired", "canceled", "dead_lettered")


def totals(hourly_table: DataFrame) -> Totals:
    row = hourly_table.agg(*(F.sum(name).alias(name) for name in COUNTS)).first()
    values = {name: int(row[name] or 0) if row is not None else 0 for name in COUNTS}
    return Totals(**values)


def throughput(hourly_table: DataFrame) -> list[dict[str, Any]]:
    rows = (
        hourly_table.groupBy("hour")
        .agg(*(F.sum(name).alias(name) for name in ("accepted", "confirmed", "failed", "expired")))
        .orderBy("hour")
        .collect()
    )
    return [
        {
            "hour": row["hour"].isoformat(),
            "accepted": int(row["accepted"]),
            "confirmed": int(row["confirmed"]),
            "failed": int(row["failed"]),
            "expired": int(row["expired"]),
        }
        for row in rows
    ]


def by_client(hourly_table: DataFrame) -> list[dict[str, Any]]:
    rows = (
        hourly_table.groupBy("client_id")
        .agg(*(F.sum(name).alias(name) for name in COUNTS))
        .orderBy(F.desc("accepted"), "client_id")
        .collect()
    )
    out = []
    for row in rows:
        client_totals = Totals(**{name: int(row[name]) for name in COUNTS})
        out.append({"client_id": row["client_id"], **client_totals.as_dict()})
    return out


def attempts_overall(attempts: DataFrame) -> dict[str, int]:
    rows = (
        attempts.groupBy("attempts")
        .agg(F.sum("transactions").alias("transactions"))
        .orderBy("attempts")
        .collect()
    )
    return {str(row["attempts"]): int(row["transactions"]) for row in rows}


def stage_summary(stage_table: DataFrame) -> dict[str, dict[str, Any]]:
    rows = stage_table.where((F.col("type") == "all") & (F.col("speed") == "all")).collect()
    by_stage = {row["stage"]: row for row in rows}
    out: dict[str, dict[str, Any]] = {}
    for name, _, _ in STAGES:
        row = by_stage.get(name)
        out[name] = {
            "samples": int(row["samples"]) if row is not None else 0,
            **{
                f"{label}_ms": (row[f"{label}_ms"] if row is not None else None)
                for label, _ in PERCENTILES
            },
        }
    return out
