"""Lifecycles of archived transactions: derived once per closed archive date, then reused.

A report over history that is mostly archived spends most of its time turning ~4 events per
transaction into one lifecycle row per transaction (``history.lifecycle.lifecycles``). An archived
date changes only when an archive run adds files to it, so its lifecycle rows are computed once,
written beside the archive (``PATH/_derived/lifecycles/date=…``, see ``derived.repository``) and
read back by later reports; only the dates the store does not hold under the current key are
computed, from the archive's Parquet (the dates' partitions only, the columns used only).

The key of a date, kept in its manifest:

- the code version: a hash of the sources that decide a lifecycle row (``history/lifecycle.py``;
  ``history/repository.py``, which turns archived rows into history rows; this module; the
  store's layout), of the schema ``lifecycles()`` returns and of ``FORMAT``. Any change to them
  rebuilds every date, and the stored columns are whatever ``lifecycles()`` returns.
- the date's archive files, each with its length and modification time: an archive run that
  adds to a date (or anything that rewrites one of its files) rebuilds that date.

Same figures as from the database: a report reads a transaction's events from the window's
start to its end plus a lookahead (``JdbcReader.event_lookahead``). A stored row was computed
from all of its transaction's archived events, so it is used as it is only on dates whose
archived events all fall inside that reach (the manifest records each date's first and last
event). On the other dates — the window's first, partial date, typically — the transactions
with an event outside the reach are computed again from the archive with the events inside it.
"""

from __future__ import annotations

import hashlib
import inspect
import marshal
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import ModuleType
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from relay_pipeline.derived import repository as store_layout
from relay_pipeline.derived.repository import PARTITION, DerivedStore, Manifest, archive_inputs
from relay_pipeline.history import lifecycle as lifecycle_code
from relay_pipeline.history import repository as history_code
from relay_pipeline.history.lifecycle import lifecycles
from relay_pipeline.history.repository import (
    ARCHIVE_EVENTS,
    ARCHIVE_TRANSACTIONS,
    EVENT_SCHEMA,
    TX_SCHEMA,
    ArchiveReader,
)
from relay_pipeline.history.window import Window, utcnow
from relay_pipeline.storage import Storage

NAME = "lifecycles"
# Raised by hand when what a stored row means changes in a way the hashed sources do not show.
FORMAT = 1
TABLES = (ARCHIVE_TRANSACTIONS, ARCHIVE_EVENTS)
# An archive run publishing while dates are derived: those dates are derived again.
BUILD_ROUNDS = 3
DAY = timedelta(days=1)

Note = Callable[[str], None]


def derived_schema(spark: SparkSession) -> StructType:
    """What ``lifecycles()`` returns today: the stored rows' schema."""
    return lifecycles(
        spark.createDataFrame([], TX_SCHEMA), spark.createDataFrame([], EVENT_SCHEMA)
    ).schema


def _source(module: ModuleType) -> bytes:
    try:
        return inspect.getsource(module).encode()
    except (OSError, TypeError):  # installed without sources: the compiled code then
        loader: Any = module.__loader__
        return marshal.dumps(loader.get_code(module.__name__))


def code_version(schema: StructType) -> str:
    digest = hashlib.sha256(f"format {FORMAT}\n{schema.json()}\n".encode())
    for module in (lifecycle_code, history_code, sys.modules[__name__], store_layout):
        digest.update(_source(module))
    return digest.hexdigest()[:32]


def _day(date: str) -> datetime:
    return datetime.fromisoformat(date)


def _overlaps(date: str, window: Window) -> bool:
    return _day(date) < window.until and _day(date) + DAY > window.since


def _runs(dates: list[str]) -> list[Window]:
    """Contiguous runs of dates, each as the window of its days."""
    windows: list[Window] = []
    for date in sorted(dates):
        start = _day(date)
        if windows and windows[-1].until == start:
            windows[-1] = Window(windows[-1].since, start + DAY)
        else:
            windows.append(Window(start, start + DAY))
    return windows


def _within(column: str, window: Window) -> Column:
    return (F.col(column) >= F.lit(window.since)) & (F.col(column) < F.lit(window.until))


def _union(frames: list[DataFrame]) -> DataFrame:
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


def _archived(archive: ArchiveReader, windows: list[Window]) -> tuple[DataFrame, DataFrame]:
    """Archived transactions accepted inside ``windows`` and the events of their dates."""
    tx_parts, ev_parts = [], []
    for window in windows:
        # Events are pruned by date only, the window's last date included: a window ending at
        # midnight would read the next date's events too.
        last = window.until - timedelta(microseconds=1)
        dates = Window(window.since, last) if last > window.since else window
        tx, ev = archive.transactions(window), archive.events(dates)
        if tx is None or ev is None:
            raise FileNotFoundError(f"the archive at {archive.path} has no readable tables")
        tx_parts.append(tx)
        ev_parts.append(ev)
    return _union(tx_parts), _union(ev_parts)


def _event_bounds(spark: SparkSession, root: str, dates: list[str]) -> dict[str, dict[str, Any]]:
    """First and last archived event of each date (events are filed under their transaction's
    accept date); only ``created_at`` of those partitions is read."""
    events = spark.read.parquet(f"{root.rstrip('/')}/{ARCHIVE_EVENTS}")
    day = F.col(PARTITION).cast("string")
    # As text formatted by Spark (in the session's UTC): collected timestamps would be shifted
    # into the Python process's local time zone.
    text = "yyyy-MM-dd HH:mm:ss.SSSSSS"
    rows = (
        events.where(day.isin(dates))
        .groupBy(day.alias("day"))
        .agg(
            F.date_format(F.min("created_at"), text).alias("first"),
            F.date_format(F.max("created_at"), text).alias("last"),
        )
        .collect()
    )
    return {
        row["day"]: {"events_min": row["first"], "events_max": row["last"]}
        for row in rows
        if row["first"] is not None
    }


def _build(
    archive: ArchiveReader,
    store: DerivedStore,
    keys: dict[str, dict[str, Any]],
    note: Note,
) -> dict[str, Manifest]:
    """Derive and publish the lifecycles of the dates in ``keys``; returns the manifests of the
    dates published (a date whose archive files changed during the build is left out)."""
    spark = archive.spark
    dates = sorted(keys)
    build = f"{utcnow():%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    tx, ev = _archived(archive, _runs(dates))
    rows = lifecycles(tx, ev).withColumn(PARTITION, F.date_format("created_at", "yyyy-MM-dd"))
    try:
        # One file per date: a date is read (and rebuilt) on its own, and on an object store
        # fewer, larger files are cheaper to list and read.
        rows.repartition(PARTITION).write.mode("errorifexists").partitionBy(PARTITION).parquet(
            store.staging(build)
        )
        bounds = _event_bounds(spark, archive.path, dates)
        now = archive_inputs(store.storage, archive.path, TABLES)
        published = {}
        for date in dates:
            if now.get(date) != keys[date]["inputs"]:
                note(f"derived lifecycles: archive date {date} changed while derived; again")
                continue
            facts = bounds.get(date, {"events_min": None, "events_max": None})
            published[date] = store.publish(build, date, keys[date], facts)
    finally:
        store.discard(build)
    return published


def _exact(manifest: Manifest, reach: Window) -> bool:
    """True when every archived event of the date lies inside the report's event reach."""
    first, last = manifest.facts.get("events_min"), manifest.facts.get("events_max")
    if first is None or last is None:
        return True
    return (
        reach.since <= datetime.fromisoformat(first) and datetime.fromisoformat(last) < reach.until
    )


def _stored(
    spark: SparkSession, store: DerivedStore, manifests: list[Manifest], schema: StructType
) -> DataFrame | None:
    paths = [path for manifest in manifests for path in store.paths(manifest)]
    return spark.read.schema(schema).parquet(*paths) if paths else None


def _edge_rows(
    archive: ArchiveReader,
    store: DerivedStore,
    manifests: list[Manifest],
    window: Window,
    reach: Window,
    schema: StructType,
) -> DataFrame:
    """Rows of dates with archived events outside the reach: stored rows of transactions with
    every event inside it, the others computed from the archive with the events inside it."""
    days = _runs([manifest.date for manifest in manifests])
    _, events = _archived(archive, days)
    outside = (
        events.where(~_within("created_at", reach))
        .select(F.col("transaction_id").alias("id"))
        .distinct()
    )
    clipped = [
        Window(max(day.since, window.since), min(day.until, window.until))
        for day in days
        if day.since < window.until and day.until > window.since
    ]
    tx, _ = _archived(archive, clipped)
    rows = lifecycles(
        tx.join(outside, "id", "left_semi"),
        events.where(_within("created_at", reach)).join(
            outside.withColumnRenamed("id", "transaction_id"), "transaction_id", "left_semi"
        ),
    )
    stored = _stored(archive.spark, store, manifests, schema)
    if stored is not None:
        kept = stored.where(_within("created_at", window)).join(outside, "id", "left_anti")
        rows = kept.unionByName(rows)
    return rows


@dataclass
class ArchivedLifecycles:
    """``rows``: the stored dates read as Parquet, plus what had to be computed (cached in
    memory, listed in ``held``: unpersist once done). ``whole``: the dates whose stored rows
    are all in ``rows`` as they are (the day inside the window, every event inside its reach);
    ``store``/``schema``: where and what the stored rows are."""

    rows: DataFrame
    held: list[DataFrame]
    whole: list[Manifest]
    store: DerivedStore
    schema: StructType
    window: Window
    # The dates whose stored rows are read as they are (``whole`` among them).
    exact: list[Manifest]

    def rows_except(self, dates: set[str]) -> DataFrame:
        """``rows`` without the stored rows of ``dates`` (whole dates), their files not read."""
        if not dates:
            return self.rows
        return _window_rows(
            self.rows.sparkSession,
            self.store,
            [m for m in self.exact if m.date not in dates],
            self.held,
            self.window,
            self.schema,
        )


def _window_rows(
    spark: SparkSession,
    store: DerivedStore,
    exact: list[Manifest],
    computed: list[DataFrame],
    window: Window,
    schema: StructType,
) -> DataFrame:
    frames = list(computed)
    stored = _stored(spark, store, exact, schema)
    if stored is not None:
        frames.insert(0, stored.where(_within("created_at", window)))
    if not frames:  # every date left out: no rows, of the same columns
        return spark.createDataFrame([], schema)
    return _union(frames).select(*schema.fieldNames())


def archived_lifecycles(
    archive: ArchiveReader,
    window: Window,
    lookahead: timedelta,
    note: Note = lambda _line: None,
) -> ArchivedLifecycles | None:
    """Lifecycles of the archived transactions accepted inside ``window``, equal row for row
    to ``lifecycles()`` of the same transactions read from the database with events up to
    ``window.until + lookahead``; None when the archive holds no date of the window."""
    spark = archive.spark
    storage = Storage(spark)
    store = DerivedStore(storage, archive.path, NAME)
    schema = derived_schema(spark)
    version = code_version(schema)

    def keys_of(inputs: dict[str, Any], dates: list[str]) -> dict[str, dict[str, Any]]:
        return {d: {"code_version": version, "inputs": inputs[d]} for d in dates if d in inputs}

    inputs = archive_inputs(storage, archive.path, TABLES)
    dates = [d for d in sorted(inputs) if inputs[d][ARCHIVE_TRANSACTIONS] and _overlaps(d, window)]
    if not dates:
        return None
    keys = keys_of(inputs, dates)
    present = store.present()
    manifests: dict[str, Manifest | None] = {
        d: store.valid(d, keys[d], present.get(d, set())) for d in dates
    }
    for _ in range(BUILD_ROUNDS):
        stale = [d for d, manifest in manifests.items() if manifest is None]
        if not stale:
            break
        note(
            f"derived lifecycles: deriving {len(stale)} archived date(s) {stale[0]} … {stale[-1]}, "
            f"reusing {len(dates) - len(stale)}"
        )
        manifests.update(_build(archive, store, {d: keys[d] for d in stale}, note))
        keys.update(keys_of(archive_inputs(storage, archive.path, TABLES), stale))
    ready = [m for m in manifests.values() if m is not None]
    if len(ready) != len(dates):
        raise RuntimeError(
            f"archive dates kept changing while their lifecycles were derived ({archive.path})"
        )
    reach = Window(window.since, window.until + lookahead)
    exact = [m for m in ready if _exact(m, reach)]
    held = []
    edge = [m for m in ready if not _exact(m, reach)]
    if edge:
        note(f"derived lifecycles: {len(edge)} date(s) with events outside the window's reach")
        computed = _edge_rows(archive, store, edge, window, reach, schema).persist(
            StorageLevel.MEMORY_AND_DISK
        )
        held.append(computed)
    if not held and not any(m.files for m in exact):
        return None
    whole = [
        m for m in exact if window.since <= _day(m.date) and _day(m.date) + DAY <= window.until
    ]
    return ArchivedLifecycles(
        rows=_window_rows(spark, store, exact, held, window, schema),
        held=held,
        whole=whole,
        store=store,
        schema=schema,
        window=window,
        exact=exact,
    )
