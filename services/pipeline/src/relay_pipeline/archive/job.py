"""``relay-pipeline archive``: move finished history from the database into Parquet, losslessly.

Every run goes through the same steps, and every step can be interrupted:

1. recover — a staged run with a verified plan is published (rolled forward); a staged run
   without one is discarded. Nothing in the database has been touched by either.
2. read — terminal transactions last updated before the cutoff, with their events.
3. split — rows already in the published archive (an earlier run stopped before or during its
   delete) are not written again; their archived copy is compared with the database row by
   row (row hash + events hash) and only matching ones are deleted below.
4. stage and verify — new rows are written under ``_staging/<run>/`` partitioned by date, read
   back, and per partition the row count, distinct ids and checksum must equal the source's.
   Only then is ``PLAN.json`` written: it is the point after which the run is rolled forward.
5. publish — staged files are renamed into ``transactions/date=…/`` and
   ``transaction_events/date=…/``; the run's manifest lands in ``_runs/<run>.json``.
6. delete — the verified ids leave the database in bounded batches, one DB transaction each.

So a row is deleted only once its archived copy has been read back and checked, and a row is
written to the archive at most once (a re-run writes only what the archive does not have).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from relay_pipeline.archive import repository
from relay_pipeline.archive.service import (
    PARTITION,
    PartitionStats,
    compare,
    fingerprints,
    partition_stats,
    with_partition,
)
from relay_pipeline.database import Database
from relay_pipeline.history.repository import ARCHIVE_EVENTS, ARCHIVE_TRANSACTIONS
from relay_pipeline.storage import Storage

TABLES = (ARCHIVE_TRANSACTIONS, ARCHIVE_EVENTS)
Checkpoint = Callable[[str], None]


class ArchiveVerificationError(RuntimeError):
    """What was read back is not what was written; nothing was published or deleted."""


@dataclass
class ArchiveResult:
    run_id: str
    cutoff: str
    due: int = 0
    written: int = 0
    written_events: int = 0
    already_archived: int = 0
    deleted: int = 0
    mismatched: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)
    partitions: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class ArchiveRequest:
    out: str
    cutoff: datetime
    batch_size: int
    partitions: int
    fetch_size: int


class ArchiveLayout:
    def __init__(
        self, storage: Storage, root: str, schemas: repository.TableSchemas | None = None
    ) -> None:
        self.storage = storage
        self.root = storage.qualify(root).rstrip("/")
        self.schemas = schemas or repository.TableSchemas(
            repository.TRANSACTION_SCHEMA, repository.EVENT_SCHEMA
        )

    def schema(self, table: str) -> StructType:
        return self.schemas.transactions if table == ARCHIVE_TRANSACTIONS else self.schemas.events

    def table(self, name: str) -> str:
        return f"{self.root}/{name}"

    def staging(self, run_id: str) -> str:
        return f"{self.root}/_staging/{run_id}"

    def plan(self, run_id: str) -> str:
        return f"{self.staging(run_id)}/PLAN.json"

    def manifest(self, run_id: str) -> str:
        return f"{self.root}/_runs/{run_id}.json"


def run_archive(
    spark: SparkSession,
    db: Database,
    request: ArchiveRequest,
    *,
    checkpoint: Checkpoint = lambda _name: None,
    note: Callable[[str], None] = lambda _line: None,
) -> ArchiveResult:
    storage = Storage(spark)
    layout = ArchiveLayout(storage, request.out, repository.table_schemas(db))
    run_id = f"{datetime.now():%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    result = ArchiveResult(run_id=run_id, cutoff=request.cutoff.isoformat(sep=" "))

    with repository.archive_lock(db) as conn:
        result.recovered = recover(layout, note)
        checkpoint("recovered")

        due = repository.archivable(db, request.cutoff)
        result.due = due.transactions
        note(f"archive: {due.transactions:,} finished transactions updated before {result.cutoff}")
        if due.transactions == 0 or due.oldest_update is None:
            return result

        tx_source, ev_source = repository.read_due(
            spark,
            db,
            layout.schemas,
            request.cutoff,
            due.oldest_update,
            request.partitions,
            request.fetch_size,
        )
        transactions = with_partition(tx_source).persist(StorageLevel.MEMORY_AND_DISK)
        events = (
            ev_source.withColumn(PARTITION, F.date_format("tx_created_at", "yyyy-MM-dd"))
            .drop("tx_created_at")
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        try:
            new_tx, new_ev = _not_yet_archived(spark, layout, transactions, events)
            new_tx = new_tx.persist(StorageLevel.MEMORY_AND_DISK)
            if not new_tx.isEmpty():
                stats = _stage_and_verify(layout, run_id, new_tx, new_ev, checkpoint, note)
                result.partitions = stats
                result.written = sum(p[ARCHIVE_TRANSACTIONS]["rows"] for p in stats.values())
                result.written_events = sum(p[ARCHIVE_EVENTS]["rows"] for p in stats.values())
                _publish(layout, run_id, checkpoint, note)
            new_tx.unpersist()
            result.already_archived = result.due - result.written
            # Everything due is in the archive now. Delete only what is there identically.
            verified, mismatched = _archived_identically(spark, layout, transactions, events)
            result.mismatched = mismatched
            if mismatched:
                note(
                    f"archive: {len(mismatched)} archived transactions differ from the database; "
                    "they stay in the database (first: " + ", ".join(mismatched[:5]) + ")"
                )
            result.deleted = _delete(conn, db, verified, request.batch_size, checkpoint, note)
        finally:
            transactions.unpersist()
            events.unpersist()
    note(
        f"archive: wrote {result.written:,} transactions ({result.written_events:,} events), "
        f"{result.already_archived:,} were already archived, deleted {result.deleted:,}"
    )
    return result


def recover(layout: ArchiveLayout, note: Callable[[str], None]) -> list[str]:
    """Finish or discard what an interrupted run left in ``_staging``."""
    recovered = []
    for run_id, is_dir in layout.storage.children(f"{layout.root}/_staging"):
        if not is_dir:
            continue
        if layout.storage.exists(layout.plan(run_id)):
            note(f"archive: run {run_id} was verified but not fully published; publishing it")
            _publish(layout, run_id, lambda _name: None, note)
        else:
            note(f"archive: run {run_id} stopped before verification; discarding its staging")
            layout.storage.delete(layout.staging(run_id))
        recovered.append(run_id)
    return recovered


def _not_yet_archived(
    spark: SparkSession, layout: ArchiveLayout, transactions: DataFrame, events: DataFrame
) -> tuple[DataFrame, DataFrame]:
    """Due transactions (and their events) that the published archive does not hold."""
    dates = _dates(transactions)
    archived_tx = _published(spark, layout, ARCHIVE_TRANSACTIONS, dates)
    if archived_tx is None:
        return transactions, events
    new_tx = transactions.join(archived_tx.select("id"), "id", "left_anti")
    new_ev = events.join(
        new_tx.select(F.col("id").alias("transaction_id")), "transaction_id", "left_semi"
    )
    return new_tx, new_ev


def _archived_identically(
    spark: SparkSession, layout: ArchiveLayout, transactions: DataFrame, events: DataFrame
) -> tuple[DataFrame, list[str]]:
    """(ids whose archived row and events equal the database's, ids that differ or are absent)."""
    dates = _dates(transactions)
    archived_tx = _published(spark, layout, ARCHIVE_TRANSACTIONS, dates)
    archived_ev = _published(spark, layout, ARCHIVE_EVENTS, dates)
    if archived_tx is None:
        archived_tx = spark.createDataFrame([], layout.schemas.transactions)
    if archived_ev is None:
        archived_ev = spark.createDataFrame([], layout.schemas.events)
    due_ids = transactions.select("id")
    in_db = fingerprints(transactions.drop(PARTITION), events.drop(PARTITION)).alias("db")
    in_archive = fingerprints(
        archived_tx.join(due_ids, "id", "left_semi").drop(PARTITION),
        archived_ev.join(
            due_ids.withColumnRenamed("id", "transaction_id"), "transaction_id", "left_semi"
        ).drop(PARTITION),
    ).alias("ar")
    compared = in_db.join(in_archive, F.col("db.id") == F.col("ar.id"), "left")
    same = (
        F.col("ar.id").isNotNull()
        & (F.col("db.row_hash") == F.col("ar.row_hash"))
        & (F.col("db.events_hash") == F.col("ar.events_hash"))
        & (F.col("db.event_rows") == F.col("ar.event_rows"))
    )
    flagged = compared.select(F.col("db.id").alias("id"), same.alias("same")).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    mismatched = [row["id"] for row in flagged.where(~F.col("same")).select("id").collect()]
    return flagged.where(F.col("same")).select("id"), mismatched


def _dates(transactions: DataFrame) -> list[str]:
    return [row[PARTITION] for row in transactions.select(PARTITION).distinct().collect()]


def _published(
    spark: SparkSession, layout: ArchiveLayout, table: str, dates: list[str]
) -> DataFrame | None:
    root = layout.table(table)
    present = {
        name.split("=", 1)[1]
        for name, is_dir in layout.storage.children(root)
        if is_dir and name.startswith(f"{PARTITION}=")
    }
    wanted = [f"{root}/{PARTITION}={d}" for d in sorted(present & set(dates))]
    if not wanted:
        return None
    schema = layout.schema(table)
    return spark.read.schema(schema).option("basePath", root).parquet(*wanted)


def _stage_and_verify(
    layout: ArchiveLayout,
    run_id: str,
    transactions: DataFrame,
    events: DataFrame,
    checkpoint: Checkpoint,
    note: Callable[[str], None],
) -> dict[str, Any]:
    staging = layout.staging(run_id)
    expected = {
        ARCHIVE_TRANSACTIONS: partition_stats(transactions),
        ARCHIVE_EVENTS: partition_stats(events),
    }
    for table, df in ((ARCHIVE_TRANSACTIONS, transactions), (ARCHIVE_EVENTS, events)):
        (
            df.repartition(PARTITION)
            .sortWithinPartitions(PARTITION, "created_at")
            .write.mode("errorifexists")
            .partitionBy(PARTITION)
            .parquet(f"{staging}/{table}")
        )
    checkpoint("staged")
    note(f"archive: staged run {run_id}; reading it back")

    spark = transactions.sparkSession
    problems = []
    actual: dict[str, dict[str, PartitionStats]] = {}
    for table in TABLES:
        actual[table] = partition_stats(
            _with_dir_partition(spark, staging, table, layout.schema(table))
        )
        problems += [f"{table}: {p}" for p in compare(expected[table], actual[table])]
    if problems:
        raise ArchiveVerificationError("; ".join(problems))

    files = {table: layout.storage.files(f"{staging}/{table}") for table in TABLES}
    dates = sorted(expected[ARCHIVE_TRANSACTIONS])
    partitions = {
        date: {
            table: (expected[table][date].as_dict() if date in expected[table] else None)
            for table in TABLES
        }
        for date in dates
    }
    plan = {
        "run_id": run_id,
        "partitions": partitions,
        "files": {
            table: [f for f in names if f.rsplit("/", 1)[-1].startswith("part-")]
            for table, names in files.items()
        },
    }
    layout.storage.write_text(layout.plan(run_id), json.dumps(plan, indent=2))
    checkpoint("verified")
    return partitions


def _with_dir_partition(spark: SparkSession, staging: str, table: str, schema: Any) -> DataFrame:
    """Read a staged table back with its ``date`` taken from the directory names."""
    df = spark.read.parquet(f"{staging}/{table}")
    columns = [F.col(f.name).cast(f.dataType) for f in schema.fields]
    return df.select(*columns, F.col(PARTITION).cast("string").alias(PARTITION))


def _publish(
    layout: ArchiveLayout,
    run_id: str,
    checkpoint: Checkpoint,
    note: Callable[[str], None],
) -> None:
    """Move a verified run's files into the archive; safe to repeat after any interruption."""
    storage = layout.storage
    staging = layout.staging(run_id)
    plan = json.loads(storage.read_text(layout.plan(run_id)))
    moved = 0
    for table in TABLES:
        for relative in plan["files"][table]:
            source = f"{staging}/{table}/{relative}"
            target = f"{layout.table(table)}/{relative}"
            if storage.exists(source):
                if storage.exists(target):
                    # An object store's rename copied, then died before deleting the source.
                    storage.delete(source, recursive=False)
                elif not storage.rename(source, target):
                    raise OSError(f"could not move {source} to {target}")
            elif not storage.exists(target):
                raise ArchiveVerificationError(f"{relative} of run {run_id} is lost")
            moved += 1
            if moved == 1:
                checkpoint("publishing")
    storage.write_text(layout.manifest(run_id), json.dumps(plan, indent=2))
    storage.delete(staging)
    checkpoint("published")
    note(f"archive: published run {run_id} ({moved} files)")


def _delete(
    conn: Any,
    db: Database,
    ids: DataFrame,
    batch_size: int,
    checkpoint: Checkpoint,
    note: Callable[[str], None],
) -> int:
    deleted = 0
    for batch_no, batch in enumerate(_batches(ids, batch_size), 1):
        deleted += repository.delete_transactions(conn, db, batch)
        checkpoint("deleted-batch")
        if batch_no % 50 == 0:
            note(f"archive: deleted {deleted:,} transactions")
    return deleted


def _batches(ids: DataFrame, size: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for row in ids.toLocalIterator():
        batch.append(row["id"])
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch
