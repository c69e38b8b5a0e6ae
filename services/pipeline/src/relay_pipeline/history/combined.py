"""The lifecycles of a window's transactions from wherever they are: the database (JDBC), the
Parquet archive (through the per-date lifecycles derived beside it), or both.

With both, the database holds only the tail the archive has not taken yet, so each source is
read for the whole window and holds its own part. A transaction found in both (an archive run
stopped between its write and its delete, or a row changed after it was archived) is counted
once, from the database: the figures are those of reading everything from the database.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pyspark import StorageLevel
from pyspark.sql import DataFrame
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


@dataclass
class WindowLifecycles:
    """One lifecycle row per transaction of the window. What came from the database is cached
    in memory (read once); archived dates stay Parquet, read by each use, the columns it needs
    only. ``release()`` when done with ``rows``."""

    rows: DataFrame
    held: list[DataFrame] = field(default_factory=list)
    # The database's part (cached), if a database was read.
    database: DataFrame | None = None
    archived: ArchivedLifecycles | None = None
    # The rows not read from stored dates as they are: the database's, corrected dates'.
    tail: DataFrame | None = None

    def grouped(self, name: str, table: Table, group: Sequence[str]) -> DataFrame:
        """``table(rows)`` for a table local to each ``group`` (see ``derived.tables``): the
        groups of whole archived dates the tail does not touch come from stored tables."""
        return grouped_table(self._rows_except, self.archived, self.tail, name, table, group)

    def _rows_except(self, dates: set[str]) -> DataFrame:
        if not dates or self.archived is None:
            return self.rows
        return _combined(self.database, self.archived.rows_except(dates))

    def read(self) -> int:
        """Read the database's part into memory now; how many transactions it holds."""
        return self.database.count() if self.database is not None else 0

    def release(self) -> None:
        for frame in self.held:
            frame.unpersist()
        self.held.clear()


def window_lifecycles(
    jdbc: JdbcReader | None,
    archive: ArchiveReader | None,
    window: Window,
    note: Callable[[str], None] = lambda _line: None,
) -> WindowLifecycles:
    if jdbc is None and archive is None:
        raise ValueError("no input: give a database, an archive, or both")
    held: list[DataFrame] = []
    from_database = None
    if jdbc is not None:
        from_database = lifecycles(jdbc.transactions(window), jdbc.events(window)).persist(
            StorageLevel.MEMORY_AND_DISK
        )
        held.append(from_database)
    archived = None
    if archive is not None:
        lookahead = jdbc.event_lookahead if jdbc is not None else JdbcReader.event_lookahead
        archived = archived_lifecycles(archive, window, lookahead, note)
        if archived is not None:
            held += archived.held
    if from_database is None and archived is None:  # an archive without the window's dates
        spark = archive.spark  # type: ignore[union-attr]
        rows = lifecycles(
            spark.createDataFrame([], TX_SCHEMA), spark.createDataFrame([], EVENT_SCHEMA)
        )
    else:
        rows = _combined(from_database, archived.rows if archived is not None else None)
    tail = from_database
    for computed in archived.held if archived is not None else []:
        tail = computed if tail is None else tail.unionByName(computed)
    return WindowLifecycles(
        rows=rows, held=held, database=from_database, archived=archived, tail=tail
    )


def _combined(database: DataFrame | None, archived: DataFrame | None) -> DataFrame:
    """The database's rows and the archived ones but those the database also has."""
    if archived is None:
        assert database is not None
        return database
    if database is None:
        return archived
    # The tail is small next to the archive: its ids go to every task, so the archived rows
    # are filtered where they are read, without a shuffle.
    return database.unionByName(
        archived.join(F.broadcast(database.select("id")), "id", "left_anti")
    )
