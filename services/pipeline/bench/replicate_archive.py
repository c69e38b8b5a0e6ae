"""Benchmark helper: an archive N times the size of another, for a report over the archive alone.

Seeding and archiving 10 M transactions takes one to two hours here (the archive's row-by-row
deletes most of it); the warm report over a month of the archive reads only the archive. This
writes every transaction and event of ``SOURCE`` N times into ``TARGET`` in the archive's own
layout (``transactions`` and ``transaction_events``, partitioned by ``date``, zstd Parquet),
each copy with fresh ids (a transaction id suffixed ``-r<k>``, an event id offset by k·10^12),
so the copies are distinct transactions on the same dates, hours, clients and speeds: the
same month at N times the density. Not a test, and not an archive run: no `_runs` manifest,
no database.

    uv run python services/pipeline/bench/replicate_archive.py SOURCE TARGET --copies 10
    uv run relay-pipeline report --archive TARGET --archive-only --since … --until … --out …
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import reduce

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from relay_pipeline.history.repository import ARCHIVE_EVENTS, ARCHIVE_TRANSACTIONS

# The id columns of each table that a copy must change to stay distinct.
IDS = {ARCHIVE_TRANSACTIONS: ("id",), ARCHIVE_EVENTS: ("transaction_id", "id")}
EVENT_ID_STEP = 10**12


def _copy(table: DataFrame, columns: tuple[str, ...], k: int) -> DataFrame:
    for name in columns:
        if dict(table.dtypes)[name] == "string":
            table = table.withColumn(name, F.concat(F.col(name), F.lit(f"-r{k}")))
        else:
            table = table.withColumn(name, F.col(name) + F.lit(k * EVENT_ID_STEP))
    return table


def replicate(spark: SparkSession, source: str, target: str, copies: int) -> None:
    for name, columns in IDS.items():
        began = time.monotonic()
        table = spark.read.parquet(f"{source.rstrip('/')}/{name}")
        copied = [table] + [_copy(table, columns, k) for k in range(1, copies)]
        reduce(DataFrame.unionByName, copied).repartition("date").write.mode(
            "errorifexists"
        ).partitionBy("date").parquet(f"{target.rstrip('/')}/{name}")
        sys.stdout.write(f"{name}: {copies} copies in {time.monotonic() - began:.1f} s\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", help="an archive (relay-pipeline archive's --out)")
    parser.add_argument("target", help="a new directory")
    parser.add_argument("--copies", type=int, default=10)
    parser.add_argument("--driver-memory", default="6g")
    args = parser.parse_args()
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.driver.memory", args.driver_memory)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.parquet.compression.codec", "zstd")
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    try:
        replicate(spark, args.source, args.target, args.copies)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
