"""Every read of transaction history: the relay database over JDBC and the Parquet archive.

Reads are partitioned by time slices of the requested window: each JDBC partition is one
range predicate on an indexed ``created_at`` that the database evaluates, and each query
names only the columns the pipeline uses, so a window never reads the whole table.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from relay_pipeline.database import Database, dbapi_connection, placeholder
from relay_pipeline.history.partitioning import int_boundaries, key_ranges, uuid_boundaries
from relay_pipeline.history.window import Window, sql_timestamp

# What the report and the anomaly scan read from a transaction row.
TX_FIELDS = (
    "id",
    "client_id",
    "type",
    "status",
    "attempts",
    "error",
    "created_at",
    "updated_at",
    "enqueued_at",
    "claimed_at",
    "submitted_at",
    "confirmed_at",
    # What it cost on chain and who sent it (migrations 0010, 0011); wei amounts are text.
    "relayer",
    "block_number",
    "gas_used",
    "effective_gas_price",
    "fee_wei",
)
# The cost columns: an archive written before they existed lacks them (read there as NULL).
COST_FIELDS = TX_FIELDS[-5:]
TX_SCHEMA = StructType(
    [
        StructField("id", StringType()),
        StructField("client_id", StringType()),
        StructField("type", StringType()),
        StructField("status", StringType()),
        StructField("speed", StringType()),
        StructField("attempts", IntegerType()),
        StructField("error", StringType()),
        *(
            StructField(name, TimestampType())
            for name in (
                "created_at",
                "updated_at",
                "enqueued_at",
                "claimed_at",
                "submitted_at",
                "confirmed_at",
            )
        ),
        StructField("relayer", StringType()),
        StructField("block_number", LongType()),
        StructField("gas_used", LongType()),
        StructField("effective_gas_price", StringType()),
        StructField("fee_wei", StringType()),
        # A direct request's value (decimal wei text); gasless requests have none at the top.
        StructField("value_wei", StringType()),
    ]
)
# What the report and the anomaly scan read from an event row. The event's ``reason`` is not
# read: failure reasons come from the transaction's ``error``.
EVENT_FIELDS = (
    "id",
    "transaction_id",
    "from_status",
    "to_status",
    "source",
    "created_at",
)
EVENT_SCHEMA = StructType(
    [
        StructField("id", LongType()),
        StructField("transaction_id", StringType()),
        StructField("from_status", StringType()),
        StructField("to_status", StringType()),
        StructField("source", StringType()),
        StructField("created_at", TimestampType()),
    ]
)
ARCHIVE_TRANSACTIONS = "transactions"
ARCHIVE_EVENTS = "transaction_events"

NON_TERMINAL = ("pending", "processing", "submitted", "mined")


def read_jdbc(
    spark: SparkSession,
    db: Database,
    query: str,
    predicates: list[str],
    schema: StructType,
    fetch_size: int,
) -> DataFrame:
    """One JDBC partition per predicate over ``query``; the result conformed to ``schema``."""
    properties = db.jdbc_properties(fetch_size)
    if db.dialect == "sqlite":
        # SQLite columns have no fixed type (an expression's type is guessed from its first
        # value) and DATETIME is text: name every type, read timestamps as text, cast later.
        properties["customSchema"] = ", ".join(
            f"{field.name} {_sqlite_type(field.dataType)}" for field in schema.fields
        )
    df = spark.read.jdbc(db.jdbc_url, f"({query}) q", predicates=predicates, properties=properties)
    return conform(df, schema)


def _sqlite_type(data_type: DataType) -> str:
    return "STRING" if isinstance(data_type, TimestampType) else data_type.simpleString()


@dataclass(frozen=True)
class JdbcReader:
    """Partitioned JDBC reads of one relay database."""

    spark: SparkSession
    db: Database
    partitions: int
    fetch_size: int
    # How long after the window's end events are still matched to the window's transactions.
    event_lookahead: timedelta = timedelta(days=1)

    def _read(self, query: str, predicates: list[str], schema: StructType) -> DataFrame:
        return read_jdbc(self.spark, self.db, query, predicates, schema, self.fetch_size)

    def _speed_sql(self) -> str:
        # Direct requests carry their speed; gasless requests have none (reported as "n/a").
        if self.db.dialect == "sqlite":
            return "json_extract(t.request, '$.speed')"
        return "JSON_UNQUOTE(JSON_EXTRACT(t.request, '$.speed'))"

    def _value_sql(self) -> str:
        if self.db.dialect == "sqlite":
            return "json_extract(t.request, '$.value')"
        return "JSON_UNQUOTE(JSON_EXTRACT(t.request, '$.value'))"

    def _tx_select(self) -> str:
        columns = ", ".join(f"t.{name}" for name in TX_FIELDS)
        return (
            f"SELECT {columns}, {self._speed_sql()} AS speed, {self._value_sql()} AS value_wei "
            "FROM transactions t"
        )

    def _key_bounds(self, sql: str, params: tuple[str, ...]) -> tuple[object, object]:
        """Planning query: a pair of key values, answered from an index."""
        with dbapi_connection(self.db) as conn:
            cursor = conn.cursor()
            cursor.execute(sql.replace("?", placeholder(self.db)), params)
            low, high = cursor.fetchone()
            conn.rollback()
        return low, high

    def transaction_predicates(self, window: Window) -> list[str]:
        low, high = self._key_bounds("SELECT MIN(id), MAX(id) FROM transactions", ())
        cuts = uuid_boundaries(
            str(low) if low else None, str(high) if high else None, self.partitions
        )
        in_window = window.predicates("created_at", 1)[0]
        if not cuts:  # ids that are not UUIDs: slice by time instead
            return window.predicates("created_at", self.partitions)
        return [f"{keys} AND {in_window}" for keys in key_ranges("id", cuts)]

    def event_predicates(self, reach: Window) -> list[str]:
        # Ids grow with time: the first and last event of the reach bound the key range.
        since, until = sql_timestamp(reach.since), sql_timestamp(reach.until)
        first, _ = self._key_bounds(
            "SELECT MIN(id), 0 FROM (SELECT id FROM transaction_events WHERE created_at >= ? "
            "ORDER BY created_at LIMIT 1) f",
            (since,),
        )
        last, _ = self._key_bounds(
            "SELECT MAX(id), 0 FROM (SELECT id FROM transaction_events WHERE created_at < ? "
            "ORDER BY created_at DESC LIMIT 1) l",
            (until,),
        )
        cuts = int_boundaries(
            int(first) if first is not None else None,  # type: ignore[call-overload]
            int(last) if last is not None else None,  # type: ignore[call-overload]
            self.partitions,
        )
        in_reach = reach.predicates("created_at", 1)[0]
        return [f"{keys} AND {in_reach}" for keys in key_ranges("id", cuts)]

    def transactions(self, window: Window) -> DataFrame:
        """Transactions accepted inside the window."""
        return self._read(self._tx_select(), self.transaction_predicates(window), TX_SCHEMA)

    def open_transactions(self, exclude: Window | None = None) -> DataFrame:
        """Every transaction not yet in a terminal status (optionally not those in ``exclude``).

        Stuck rows can be of any age, so this read is bounded by status (indexed), not by time.
        """
        statuses = ", ".join(f"'{s}'" for s in NON_TERMINAL)
        where = f"status IN ({statuses})"
        if exclude is not None:
            since, until = exclude.predicates("created_at", 1)[0].split(" AND ")
            where += f" AND NOT ({since} AND {until})"
        return self._read(self._tx_select(), [where], TX_SCHEMA)

    def events(self, window: Window) -> DataFrame:
        """Events that can belong to transactions accepted inside the window.

        An event happens after its transaction was accepted, so events are read by their own
        (indexed) ``created_at`` from the window's start to its end plus ``event_lookahead``;
        matching them to the window's transactions happens in Spark. Joining in the database
        instead costs an index lookup per transaction and measured 3× slower.
        """
        columns = ", ".join(f"e.{name}" for name in EVENT_FIELDS)
        query = f"SELECT {columns} FROM transaction_events e"
        reach = Window(window.since, window.until + self.event_lookahead)
        return self._read(query, self.event_predicates(reach), EVENT_SCHEMA)

    def events_of_open_transactions(self, exclude: Window | None = None) -> DataFrame:
        statuses = ", ".join(f"'{s}'" for s in NON_TERMINAL)
        columns = ", ".join(f"e.{name}" for name in EVENT_FIELDS)
        where = f"t.status IN ({statuses})"
        if exclude is not None:
            since, until = exclude.predicates("t.created_at", 1)[0].split(" AND ")
            where += f" AND NOT ({since} AND {until})"
        query = (
            f"SELECT {columns} FROM transaction_events e "
            f"JOIN transactions t ON t.id = e.transaction_id WHERE {where}"
        )
        return self._read(query, ["1 = 1"], EVENT_SCHEMA)


@dataclass(frozen=True)
class ArchiveReader:
    """The Parquet archive written by ``relay-pipeline archive``, read as history."""

    spark: SparkSession
    path: str

    def _table(self, name: str) -> DataFrame | None:
        location = f"{self.path.rstrip('/')}/{name}"
        try:
            return self.spark.read.parquet(location)
        except Exception as exc:  # an archive that has not been written yet is empty history
            if "PATH_NOT_FOUND" in str(exc) or "UNABLE_TO_INFER_SCHEMA" in str(exc):
                return None
            raise

    @staticmethod
    def _dates(df: DataFrame, window: Window) -> DataFrame:
        # Partition pruning: only the date directories the window touches are listed.
        return df.where(
            (F.col("date") >= F.lit(window.since.date()))
            & (F.col("date") <= F.lit(window.until.date()))
        )

    def transactions(self, window: Window) -> DataFrame | None:
        df = self._table(ARCHIVE_TRANSACTIONS)
        if df is None:
            return None
        df = self._dates(df, window).where(
            (F.col("created_at") >= F.lit(window.since))
            & (F.col("created_at") < F.lit(window.until))
        )
        df = df.withColumn("speed", F.get_json_object("request", "$.speed"))
        df = df.withColumn("value_wei", F.get_json_object("request", "$.value"))
        for name in COST_FIELDS:
            if name not in df.columns:
                df = df.withColumn(name, F.lit(None))
        return conform(df, TX_SCHEMA)

    def events(self, window: Window) -> DataFrame | None:
        """Archived events of the window's dates (events are filed under their transaction's
        date; the few from the window's edge dates that belong to transactions outside the
        window are dropped when events are matched to transactions)."""
        df = self._table(ARCHIVE_EVENTS)
        if df is None:
            return None
        return conform(self._dates(df, window), EVENT_SCHEMA)


def conform(df: DataFrame, schema: StructType) -> DataFrame:
    """Select exactly ``schema`` (names, order, types): the databases differ in how they type
    the same column (SQLite's ``DATETIME`` text, MySQL's ``BIGINT`` ids)."""
    return df.select(
        *(_cast(F.col(field.name), field.dataType).alias(field.name) for field in schema.fields)
    )


def _cast(column: F.Column, data_type: object) -> F.Column:
    if isinstance(data_type, TimestampType):
        # SQLite hands DATETIME back as text; the cast parses it (fraction included).
        return column.cast(TimestampType())
    return column.cast(data_type)  # type: ignore[arg-type]
