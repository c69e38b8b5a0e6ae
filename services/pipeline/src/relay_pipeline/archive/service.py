"""Checksums and manifests that prove an archive partition holds exactly the rows it should.

A row's hash covers every column and which columns are NULL; a partition's checksum is the
exact (decimal) sum of its rows' hashes — independent of row order and file layout, and a
duplicated, missing or altered row changes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

PARTITION = "date"


def row_hash(df: DataFrame, exclude: tuple[str, ...] = (PARTITION,)) -> Column:
    """Hash of every column but ``exclude``, taken in name order: joins and reads reorder
    columns, and the same row must hash the same wherever it is read from."""
    columns = sorted(name for name in df.columns if name not in exclude)
    nulls = F.concat(
        *(F.when(F.col(c).isNull(), F.lit("1")).otherwise(F.lit("0")) for c in columns)
    )
    return F.xxhash64(*(F.col(c) for c in columns), nulls)


def with_partition(df: DataFrame) -> DataFrame:
    """The archive partition of a row: the UTC date its transaction was accepted."""
    return df.withColumn(PARTITION, F.date_format(F.col("created_at"), "yyyy-MM-dd"))


@dataclass(frozen=True)
class PartitionStats:
    rows: int
    checksum: str
    distinct_ids: int

    def as_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "checksum": self.checksum, "distinct_ids": self.distinct_ids}


def partition_stats(df: DataFrame) -> dict[str, PartitionStats]:
    """Rows, checksum and distinct ids per ``date`` partition."""
    rows = (
        df.groupBy(F.col(PARTITION).cast("string").alias(PARTITION))
        .agg(
            F.count(F.lit(1)).alias("rows"),
            F.sum(row_hash(df).cast("decimal(38,0)")).cast("string").alias("checksum"),
            F.countDistinct("id").alias("distinct_ids"),
        )
        .collect()
    )
    return {
        row[PARTITION]: PartitionStats(
            int(row["rows"]), str(row["checksum"]), int(row["distinct_ids"])
        )
        for row in rows
    }


def compare(expected: dict[str, PartitionStats], actual: dict[str, PartitionStats]) -> list[str]:
    """Human-readable differences; empty when every partition matches."""
    problems = []
    for date in sorted(set(expected) | set(actual)):
        want, got = expected.get(date), actual.get(date)
        if want != got:
            problems.append(f"partition {date}: expected {want}, read back {got}")
        elif got is not None and got.distinct_ids != got.rows:
            problems.append(f"partition {date}: {got.rows - got.distinct_ids} duplicate ids")
    return problems


def fingerprints(transactions: DataFrame, events: DataFrame) -> DataFrame:
    """Per transaction id: hash of its row and exact sum of its events' hashes."""
    tx = transactions.select(F.col("id"), row_hash(transactions).alias("row_hash"))
    ev = events.groupBy(F.col("transaction_id").alias("id")).agg(
        F.sum(row_hash(events).cast("decimal(38,0)")).alias("events_hash"),
        F.count(F.lit(1)).alias("event_rows"),
    )
    return tx.join(ev, "id", "left").select(
        "id",
        "row_hash",
        F.coalesce(F.col("events_hash"), F.lit(0).cast("decimal(38,0)")).alias("events_hash"),
        F.coalesce(F.col("event_rows"), F.lit(0)).alias("event_rows"),
    )
