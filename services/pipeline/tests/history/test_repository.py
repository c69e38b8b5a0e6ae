"""Reading history: only the window, only the columns used, the same from MySQL and SQLite."""

from __future__ import annotations

from datetime import datetime, timedelta

from relay_pipeline.database import database_from_url, upgrade_schema
from relay_pipeline.history.repository import JdbcReader
from relay_pipeline.history.window import Window
from relay_pipeline.seed.service import seed_history

from ..conftest import T0

END = datetime(2026, 3, 1)


def test_a_window_reads_only_its_rows_and_their_events(spark, scratch_mysql, history):
    inside = {history.tx(T0 + timedelta(minutes=k), [("processing", 10)]) for k in range(5)}
    history.tx(T0 - timedelta(seconds=1), [("processing", 10)])
    history.tx(T0 + timedelta(hours=1), [("processing", 10)])
    history.save()
    reader = JdbcReader(spark, scratch_mysql.db, 3, 100)
    window = Window(T0, T0 + timedelta(hours=1))

    ids = {row["id"] for row in reader.transactions(window).collect()}
    assert ids == inside
    assert reader.transactions(window).rdd.getNumPartitions() == 3


def test_partition_queries_name_only_used_columns_and_use_an_index(spark, scratch_mysql, history):
    for k in range(300):
        history.tx(T0 - timedelta(days=30) + timedelta(hours=k), [("processing", 10)])
    history.save()
    reader = JdbcReader(spark, scratch_mysql.db, 2, 100)
    window = Window(T0 - timedelta(days=30), T0 - timedelta(days=29))

    plan = reader.transactions(window)._jdf.queryExecution().executedPlan().toString()
    assert "request" not in plan.split("ReadSchema")[1].split("\n")[0].replace("speed", "")
    # What MariaDB does with one partition's query: a range read, never a full table scan.
    predicate = reader.transaction_predicates(window)[0]
    explained = scratch_mysql.rows(
        f"EXPLAIN SELECT id, created_at FROM transactions WHERE {predicate}"
    )
    access_type = explained[0][3]
    assert access_type in {"range", "index_merge", "ref"}, explained


def test_sqlite_and_mariadb_give_the_same_history(spark, scratch_mysql, tmp_path):
    sqlite_url = f"sqlite:///{tmp_path / 'relay.db'}"
    upgrade_schema(sqlite_url)
    for db in (scratch_mysql.db, database_from_url(sqlite_url)):
        seed_history(db, rows=300, start=END - timedelta(days=2), end=END, seed=3)
    window = Window(END - timedelta(days=2), END)

    def fingerprint(db):
        reader = JdbcReader(spark, db, 2, 100)
        tx = sorted(tuple(r) for r in reader.transactions(window).collect())
        ev = sorted(tuple(r)[1:] for r in reader.events(window).collect())
        return tx, ev

    mysql_tx, mysql_ev = fingerprint(scratch_mysql.db)
    sqlite_tx, sqlite_ev = fingerprint(database_from_url(sqlite_url))
    assert len(mysql_tx) == 300
    assert len(mysql_ev) > 1000
    assert mysql_tx == sqlite_tx  # microsecond timestamps and the JSON speed included
    assert mysql_ev == sqlite_ev
