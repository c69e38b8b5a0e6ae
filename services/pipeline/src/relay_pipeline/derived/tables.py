"""Per-group report tables of archived dates, derived once per date beside the lifecycles
(``PATH/_derived/<table>/date=…``).

A table here is a function of lifecycles that is local to a group (hour × type × speed ×
client): its rows for a group depend on that group's lifecycles only — the hourly table, the
outcome counts behind the attempts and failure-reason tables. On a date whose day lies wholly
inside the window and whose stored lifecycles are used as they are, a group that no
transaction from the database tail falls into has exactly the rows the table gives on that
date's stored lifecycles: those are computed once and kept. The other groups (the tail's, the
window's partial or corrected dates) are computed from the window's lifecycles, as without an
archive.

The key of a date's table is the lifecycles build it was computed from (a date whose lifecycles
are derived again gets its tables again) and a hash of the table function's module source and
name; the stored schema is whatever the function returns.
"""

from __future__ import annotations

import hashlib
import inspect
import uuid
from collections.abc import Callable, Sequence
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from relay_pipeline.derived.repository import PARTITION, DerivedStore
from relay_pipeline.derived.service import ArchivedLifecycles
from relay_pipeline.history.window import utcnow

Table = Callable[[DataFrame], DataFrame]


def _version(table: Table) -> str:
    module = inspect.getmodule(table)
    source = inspect.getsource(module) if module is not None else ""
    return hashlib.sha256(f"{table.__qualname__}\n{source}".encode()).hexdigest()[:32]


def _same(columns: Sequence[str]) -> Column:
    """Group ``columns`` equal (NULL equal to NULL) to the ``_touched_`` copies of them."""
    return reduce(
        lambda a, b: a & b,
        (F.col(c).eqNullSafe(F.col(f"_touched_{c}")) for c in columns),
        F.lit(True),
    )


def stored_table(archived: ArchivedLifecycles, name: str, table: Table) -> DataFrame | None:
    """``table`` of each whole date's stored lifecycles, derived for the dates that lack it."""
    if not archived.whole:
        return None
    lifecycle_store = archived.store
    store = DerivedStore(lifecycle_store.storage, lifecycle_store.archive_root, name)
    spark = archived.rows.sparkSession
    version = _version(table)
    keys = {
        m.date: {"code_version": version, "lifecycles": m.key["code_version"], "build": m.build}
        for m in archived.whole
    }
    present = store.present()
    manifests = {d: store.valid(d, key, present.get(d, set())) for d, key in keys.items()}
    stale = [d for d, manifest in manifests.items() if manifest is None]
    if stale:
        build = f"{utcnow():%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
        sources = [p for m in archived.whole if m.date in stale for p in lifecycle_store.paths(m)]
        rows = table(spark.read.schema(archived.schema).parquet(*sources))
        try:
            rows.withColumn(PARTITION, F.date_format("hour", "yyyy-MM-dd")).repartition(
                PARTITION
            ).write.mode("errorifexists").partitionBy(PARTITION).parquet(store.staging(build))
            for date in stale:
                manifests[date] = store.publish(build, date, keys[date], {})
        finally:
            store.discard(build)
    schema = table(archived.rows).schema
    paths = [p for m in manifests.values() if m is not None for p in store.paths(m)]
    return spark.read.schema(schema).parquet(*paths) if paths else None


def grouped_table(
    rows_except: Callable[[set[str]], DataFrame],
    archived: ArchivedLifecycles | None,
    tail: DataFrame | None,
    name: str,
    table: Table,
    group: Sequence[str],
) -> DataFrame:
    """``table(rows)``, with the groups of whole archived dates that ``tail`` (the lifecycles
    not read from stored dates as they are) does not touch taken from the stored tables.
    ``rows_except(dates)``: the window's lifecycles less the stored rows of those whole dates
    (``rows_except(set())`` is all of them)."""
    stored = stored_table(archived, name, table) if archived is not None else None
    if stored is None or archived is None:
        return table(rows_except(set()))
    whole_dates = {m.date for m in archived.whole}
    whole = F.date_format("hour", "yyyy-MM-dd").isin(sorted(whole_dates))
    if tail is None:
        computed = table(rows_except(whole_dates).where(~whole))
        return stored.select(*computed.columns).unionByName(computed)
    # Renamed: the tail is part of the rows, and a join of a frame with its own columns
    # would compare each column with itself.
    touched = (
        tail.select(*(F.col(c).alias(f"_touched_{c}") for c in group))
        .distinct()
        .withColumn("_touched", F.lit(True))
    )
    stored = stored.join(F.broadcast(touched), _same(group), "left_anti")
    # A group lies within one hour: the rows of a whole date no touched group's hour falls on
    # would all be left out below, so their files are not read at all.
    untouched = whole_dates - _dates_of(touched) if "hour" in group else set()
    rows = rows_except(untouched)
    marked = rows.join(F.broadcast(touched), _same(group), "left")
    rest = marked.where(~whole | F.col("_touched").isNotNull()).select(*rows.columns)
    computed = table(rest)
    return stored.select(*computed.columns).unionByName(computed)


def _dates_of(touched: DataFrame) -> set[str]:
    hours = touched.select(F.date_format("_touched_hour", "yyyy-MM-dd").alias("date")).distinct()
    return {row["date"] for row in hours.collect()}
