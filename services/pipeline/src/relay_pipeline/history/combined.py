"""The lifecycles of a window's transactions from wherever they are: the database (JDBC), the
Parquet archive (through the per-date lifecycles derived beside it), or both.

With both, the database holds only the tail the archive has not taken yet, so each source is
read for the whole window and holds its own part. A transaction found in both (an archive run
stopped between its write and its delete, or a row changed after it was archived) is counted
once, from the database: the figures are those of reading everything from the database.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from relay_pipeline.derived.service import ArchivedLifecycles, archived_lifecycles
from relay_pipeline.derived.tables import Table, grouped_table
from relay_pipeline.history.lifecycle import lifecycles
from relay_pipeline.history.repository import (
    EVENT_SCHEMA,
    TX_SCHEMA,
    ArchiveReader,
    JdbcReader,
)
from relay_pipeline.history.window import Window

HOUR_TEXT = "yyyy-MM-dd HH"  # an hour as text in the session's time zone (UTC), to compare


@dataclass
class WindowLifecycles:
    """One lifecycle row per transaction of the window. What came from the database is cached
    in memory (read once); archived dates stay Parquet, read by each use, the columns it needs
    only. ``release()`` when done with ``rows``.

    The stored rows of the whole archived dates (``ArchivedLifecycles.whole``) are in ``rows``
    as they are, except in the ``touched`` hours: those a row read from the database falls in
    (a transaction's accept hour never changes, so an archived copy of a row in the database
    is in one of them). A table whose rows each belong to one hour (see ``derived.tables``) is
    taken for the whole dates from what was stored per date, less the touched hours, and
    computed from ``other``: every row outside the whole dates or in a touched hour."""

    rows: DataFrame
    held: list[DataFrame] = field(default_factory=list)
    archived: ArchivedLifecycles | None = None
    touched: list[str] = field(default_factory=list)
    other: DataFrame | None = None

    def grouped(self, name: str, table: Table) -> DataFrame:
        """``table(rows)`` for a table local to an hour: the whole dates' part from the
        tables stored for them, the rest computed."""
        return grouped_table(
            self.rows, self.archived, _in_hours(self.touched), self.other, name, table
        )

    def release(self) -> None:
        for frame in self.held:
            frame.unpersist()
        self.held.clear()


def _in_hours(hours: list[str]) -> Column:
    return F.date_format("hour", HOUR_TEXT).isin(hours) if hours else F.lit(False)


def _union(frames: list[DataFrame]) -> DataFrame:
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


def window_lifecycles(
    jdbc: JdbcReader | None,
    archive: ArchiveReader | None,
    window: Window,
    note: Callable[[str], None] = lambda _line: None,
) -> WindowLifecycles:
    if jdbc is None and archive is None:
        raise ValueError("no input: give a database, an archive, or both")
    from_database = None
    held: list[DataFrame] = []
    if jdbc is not None:
        from_database = lifecycles(jdbc.transactions(window), jdbc.events(window)).persist(
            StorageLevel.MEMORY_AND_DISK
        )
        held.append(from_database)
    archived = None
    if archive is not None:
        lookahead = jdbc.event_lookahead if jdbc is not None else JdbcReader.event_lookahead
        archived = archived_lifecycles(archive, window, lookahead, note)
    if archived is None:
        if from_database is None:  # an archive without any date of the window, no database
            spark = archive.spark  # type: ignore[union-attr]
            empty = lifecycles(
                spark.createDataFrame([], TX_SCHEMA), spark.createDataFrame([], EVENT_SCHEMA)
            )
            return WindowLifecycles(rows=empty, other=empty)
        return WindowLifecycles(rows=from_database, held=held, other=from_database)
    held += archived.held
    whole_dates = {m.date for m in archived.whole}
    touched: list[str] = []
    if from_database is not None:
        hours = from_database.select(F.date_format("hour", HOUR_TEXT)).distinct().collect()
        touched = sorted(row[0] for row in hours if row[0][:10] in whole_dates)
    in_touched = _in_hours(touched)
    columns = archived.schema.fieldNames()
    others: list[DataFrame] = []
    in_whole = archived.whole_rows(whole_dates)
    again = archived.whole_rows({hour[:10] for hour in touched})
    for rows in (archived.other, again.where(in_touched) if again is not None else None):
        if rows is None:
            continue
        if from_database is not None:
            # The tail is small next to the archive: its ids go to every task, so the
            # archived rows are filtered where they are read, without a shuffle.
            rows = rows.join(F.broadcast(from_database.select("id")), "id", "left_anti")
        others.append(rows.select(*columns))
    if from_database is not None:
        others.append(from_database)
    other = _union(others) if others else None
    kept = in_whole.where(~in_touched) if in_whole is not None else None
    parts = [p for p in (kept, other) if p is not None]
    return WindowLifecycles(
        rows=_union(parts), held=held, archived=archived, touched=touched, other=other
    )
