"""Per-group report tables of archived dates, derived once per date beside the lifecycles
(``PATH/_derived/<table>/date=…``).

A table here is a function of lifecycles whose rows each belong to one hour (the row has the
``hour`` of its transactions) and depend on that hour's lifecycles only — the hourly table, the
outcome counts behind the attempts and failure-reason tables, the cost cube, the stage
samples' bucket counts, the anomaly candidates. A date whose day lies wholly inside the window,
whose stored lifecycles are used as they are (a "whole" date), has, in each hour on which no
row read from the database falls, exactly the rows the table gives on that date's stored
lifecycles: those are computed once per date and kept. The rest (the database's rows, the
window's partial dates, dates with events outside the report's reach, and the hours of whole
dates the database has a row in, computed again with it: ``history.combined``) is computed
from the lifecycles, as without an archive. A re-run so reads the small stored tables and
computes only the tail.

The key of a date's table is the lifecycles build it was computed from (a date whose lifecycles
are derived again gets its tables again) and a hash of the table function's module source and
name; the stored schema is whatever the function returns.
"""

from __future__ import annotations

import hashlib
import inspect
import uuid
from collections.abc import Callable, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from relay_pipeline.derived.repository import PARTITION, DerivedStore, Manifest
from relay_pipeline.derived.service import ArchivedLifecycles
from relay_pipeline.history.window import utcnow

Table = Callable[[DataFrame], DataFrame]


def _version(table: Table) -> str:
    module = inspect.getmodule(table)
    source = inspect.getsource(module) if module is not None else ""
    return hashlib.sha256(f"{table.__qualname__}\n{source}".encode()).hexdigest()[:32]


def stored_table(
    archived: ArchivedLifecycles, name: str, table: Table, dates: Sequence[Manifest]
) -> DataFrame | None:
    """``table`` of each of the whole ``dates``' stored lifecycles, derived for those that lack
    it (None without dates)."""
    if not dates:
        return None
    lifecycle_store = archived.store
    store = DerivedStore(lifecycle_store.storage, lifecycle_store.archive_root, name)
    spark = archived.rows.sparkSession
    version = _version(table)
    keys = {
        m.date: {"code_version": version, "lifecycles": m.key["code_version"], "build": m.build}
        for m in dates
    }
    present = store.present()
    manifests = {d: store.valid(d, key, present.get(d, set())) for d, key in keys.items()}
    stale = [d for d, manifest in manifests.items() if manifest is None]
    if stale:
        build = f"{utcnow():%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
        sources = [p for m in dates if m.date in stale for p in lifecycle_store.paths(m)]
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
    if not paths:  # no date had a row of the table (nothing to count): none, planned away
        return table(archived.rows).where(F.lit(False))
    return spark.read.schema(schema).parquet(*paths)


def grouped_table(
    rows: DataFrame,
    archived: ArchivedLifecycles | None,
    touched: Column,
    other: DataFrame | None,
    name: str,
    table: Table,
) -> DataFrame:
    """``table(rows)``: the whole dates' part from the tables stored for them, less the rows
    of the ``touched`` hours, and the rest computed from ``other`` (every row on no whole date
    or in a touched hour)."""
    whole = archived.whole if archived is not None else []
    stored = stored_table(archived, name, table, whole) if archived is not None else None
    if stored is None:
        return table(rows)
    stored = stored.where(~touched)
    if other is None:
        return stored
    computed = table(other)
    return stored.select(*computed.columns).unionByName(computed)
