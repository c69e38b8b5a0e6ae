"""The archive loses nothing and writes nothing twice, however often it is interrupted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from relay_pipeline.archive.job import ArchiveRequest, run_archive
from relay_pipeline.archive.service import compare, partition_stats
from relay_pipeline.history.repository import ArchiveReader, JdbcReader
from relay_pipeline.history.window import Window, utcnow
from relay_pipeline.progress import Progress
from relay_pipeline.report.job import STEPS, ReportRequest, default_thresholds, run_report

from ..conftest import HistoryBuilder, ScratchDatabase

TS_FORMAT = "%Y-%m-%d %H:%M:%S.%f"
HALTING = Path(__file__).with_name("halting_archive.py")


class Crash(Exception):
    """Stands in for the process dying at a checkpoint (no cleanup of any kind follows)."""


def _crash_at(point: str, nth: int = 1):
    seen = {"n": 0}

    def checkpoint(name: str) -> None:
        if name == point:
            seen["n"] += 1
            if seen["n"] == nth:
                raise Crash(point)

    return checkpoint


def _seed(builder: HistoryBuilder) -> dict[str, set[str]]:
    now = utcnow()
    done = [("processing", 100), ("submitted", 500), ("mined", 9_000), ("confirmed", 90_000)]
    old, recent, stuck = set(), set(), set()
    for day in (45, 44, 44, 40, 33):  # four accept dates, one of them twice
        created = now - timedelta(days=day, hours=1)
        old.add(builder.tx(created, done))
        old.add(
            builder.tx(
                created + timedelta(minutes=1),
                [("processing", 50), ("failed", 10, "consumer.dlq", "executor 400: nonce too low")],
                error="executor 400: nonce too low",
            )
        )
    old.add(
        builder.tx(
            now - timedelta(days=41),
            [("processing", 50), ("expired", 5, "consumer.expire", "valid_until passed")],
            error="valid_until passed",
            type="gasless",
            speed=None,
        )
    )
    old.add(
        builder.tx(
            now - timedelta(days=39), [("processing", 50), ("submitted", 9), ("canceled", 9)]
        )
    )
    # Finished, but recently: stays.
    recent.add(builder.tx(now - timedelta(days=5), done))
    # Old but never finished: an archive never takes a live transaction.
    stuck.add(builder.tx(now - timedelta(days=50), [("processing", 50)]))
    builder.save()
    return {"old": old, "recent": recent, "stuck": stuck}


def _normalize(value):
    if hasattr(value, "strftime"):
        return value.strftime(TS_FORMAT)
    return value


def _columns(scratch: ScratchDatabase, table: str) -> list[str]:
    """Every column the table has now (the archive must keep all of them)."""
    rows = scratch.rows(
        "SELECT column_name FROM information_schema.columns "
        f"WHERE table_schema = '{scratch.db.name}' AND table_name = '{table}' "
        "ORDER BY ordinal_position"
    )
    return [row[0] for row in rows]


def _db_rows(scratch: ScratchDatabase) -> tuple[dict, dict]:
    out = []
    for table in ("transactions", "transaction_events"):
        columns = ", ".join(_columns(scratch, table))
        rows = scratch.rows(f"SELECT {columns} FROM {table}")
        out.append({row[0]: tuple(map(_normalize, row)) for row in rows})
    return out[0], out[1]


def _archive_rows(spark, scratch: ScratchDatabase, root: Path) -> tuple[list, list]:
    """Every archived row (duplicates kept), timestamps rendered in UTC like the DB's."""
    out = []
    for table in ("transactions", "transaction_events"):
        if not (root / table).exists():
            out.append([])
            continue
        df = spark.read.parquet(str(root / table))
        names = _columns(scratch, table)
        types = dict(df.dtypes)
        selected = [
            F.date_format(F.col(n), "yyyy-MM-dd HH:mm:ss.SSSSSS").alias(n)
            if types[n] == "timestamp"
            else F.col(n)
            for n in names
        ]
        out.append([tuple(row) for row in df.select(*selected).collect()])
    return out[0], out[1]


def _assert_lossless(spark, scratch, root, original_tx, original_ev, archived_ids):
    db_tx, db_ev = _db_rows(scratch)
    ar_tx, ar_ev = _archive_rows(spark, scratch, root)
    # No duplicates in the archive.
    assert len({r[0] for r in ar_tx}) == len(ar_tx)
    assert len({r[0] for r in ar_ev}) == len(ar_ev)
    # Nothing in both places once the run has finished.
    assert not set(db_tx) & {r[0] for r in ar_tx}
    # Database + archive = the original, row for row and column for column.
    merged_tx = {**db_tx, **{r[0]: r for r in ar_tx}}
    merged_ev = {**db_ev, **{r[0]: r for r in ar_ev}}
    assert merged_tx == original_tx
    assert merged_ev == original_ev
    assert {r[0] for r in ar_tx} == archived_ids


def _request(root: Path, batch_size: int = 1000) -> ArchiveRequest:
    return ArchiveRequest(
        out=str(root),
        cutoff=utcnow() - timedelta(days=30),
        batch_size=batch_size,
        partitions=2,
        fetch_size=1000,
    )


@pytest.fixture
def seeded(scratch_mysql, history):
    ids = _seed(history)
    tx, ev = _db_rows(scratch_mysql)
    return ids, tx, ev


def test_archive_moves_finished_rows_older_than_cutoff_and_loses_nothing(
    spark, scratch_mysql, seeded, tmp_path
):
    ids, original_tx, original_ev = seeded
    # The accept dates of what is due: 45, 44, 41, 40, 39 and 33 days ago, give or take the
    # hour (a run in the hour after midnight puts two on one date, a minute's row on another).
    accept_dates = {
        f"date={row[0]}"
        for row in scratch_mysql.rows(
            "SELECT DISTINCT DATE(created_at) FROM transactions WHERE id IN ({})".format(
                ", ".join(f"'{tx_id}'" for tx_id in sorted(ids["old"]))
            )
        )
    }
    result = run_archive(spark, scratch_mysql.db, _request(tmp_path))

    assert result.written == len(ids["old"]) == result.deleted
    assert set(_db_rows(scratch_mysql)[0]) == ids["recent"] | ids["stuck"]
    _assert_lossless(spark, scratch_mysql, tmp_path, original_tx, original_ev, ids["old"])
    # Partitioned by accept date, with the run's manifest.
    dates = {p.name for p in (tmp_path / "transactions").iterdir()}
    assert dates == accept_dates
    assert len(dates) >= 5
    assert len(list((tmp_path / "_runs").glob("*.json"))) == 1
    assert not list((tmp_path / "_staging").glob("*"))

    # Run again: nothing is due, nothing is written.
    files_before = sorted(p for p in tmp_path.rglob("*.parquet"))
    again = run_archive(spark, scratch_mysql.db, _request(tmp_path))
    assert (again.due, again.written, again.deleted) == (0, 0, 0)
    assert sorted(p for p in tmp_path.rglob("*.parquet")) == files_before


@pytest.mark.parametrize(
    ("point", "nth"),
    [
        ("staged", 1),  # written to staging, not yet verified
        ("publishing", 1),  # verified, one file moved into the archive
        ("deleted-batch", 2),  # archive complete, 2 of 6 delete batches done
    ],
)
def test_interrupted_archive_rerun_loses_nothing_and_writes_nothing_twice(
    spark, scratch_mysql, seeded, tmp_path, point, nth
):
    ids, original_tx, original_ev = seeded
    with pytest.raises(Crash):
        run_archive(
            spark,
            scratch_mysql.db,
            _request(tmp_path, batch_size=2),
            checkpoint=_crash_at(point, nth),
        )
    if point == "deleted-batch":
        assert len(_db_rows(scratch_mysql)[0]) == len(original_tx) - 4  # a partial delete

    result = run_archive(spark, scratch_mysql.db, _request(tmp_path, batch_size=2))

    assert result.mismatched == []
    _assert_lossless(spark, scratch_mysql, tmp_path, original_tx, original_ev, ids["old"])


def _run_halting(url: str, root: Path, halt_at: str, cwd: Path) -> None:
    env = dict(
        os.environ,
        HALT_AT=halt_at,
        SPARK_LOCAL_IP="127.0.0.1",
        RELAY_PIPELINE_SHUFFLE_PARTITIONS="2",
        RELAY_PIPELINE_JDBC_PARTITIONS="2",
    )
    process = subprocess.Popen(
        [
            sys.executable,
            str(HALTING),
            "archive",
            "--database-url",
            url,
            "--older-than",
            "30d",
            "--out",
            str(root),
            "--batch-size",
            "3",
            "--master",
            "local[2]",
            "--conf",
            "spark.ui.enabled=false",
            "--quiet",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=cwd,
    )
    try:
        deadline = time.monotonic() + 90
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("HALTED"):
                break
            assert time.monotonic() < deadline, "the archive never reached the checkpoint"
        else:
            pytest.fail(f"archive exited ({process.wait()}) before reaching {halt_at}")
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)


@pytest.mark.slow
def test_sigkilled_archive_between_write_and_delete_and_mid_delete_reruns_losslessly(
    spark, scratch_mysql, seeded, tmp_path
):
    ids, original_tx, original_ev = seeded
    root = tmp_path / "archive"
    # Killed once published and verified, before any delete: everything is in both places.
    _run_halting(scratch_mysql.url, root, "published", tmp_path)
    db_tx, _ = _db_rows(scratch_mysql)
    assert ids["old"] <= set(db_tx)
    assert {r[0] for r in _archive_rows(spark, scratch_mysql, root)[0]} == ids["old"]
    # Killed again after one committed delete batch of the re-run.
    _run_halting(scratch_mysql.url, root, "deleted-batch:1", tmp_path)
    assert len(_db_rows(scratch_mysql)[0]) == len(original_tx) - 3

    result = run_archive(spark, scratch_mysql.db, _request(root))

    assert result.written == 0
    assert result.already_archived == len(ids["old"]) - 3
    _assert_lossless(spark, scratch_mysql, root, original_tx, original_ev, ids["old"])


def test_row_changed_after_archiving_stays_in_database_and_is_reported(
    spark, scratch_mysql, seeded, tmp_path
):
    ids, _, _ = seeded
    with pytest.raises(Crash):
        run_archive(spark, scratch_mysql.db, _request(tmp_path), checkpoint=_crash_at("published"))
    changed = sorted(ids["old"])[0]
    with scratch_mysql.engine.begin() as conn:
        conn.exec_driver_sql(
            "UPDATE transactions SET error = 'edited after archiving' WHERE id = %s", (changed,)
        )

    result = run_archive(spark, scratch_mysql.db, _request(tmp_path))

    assert result.mismatched == [changed]
    assert set(_db_rows(scratch_mysql)[0]) == ids["recent"] | ids["stuck"] | {changed}
    assert result.deleted == len(ids["old"]) - 1


def test_report_over_database_and_archive_counts_each_transaction_once(
    spark, scratch_mysql, seeded, tmp_path
):
    window = Window(utcnow() - timedelta(days=60), utcnow())
    jdbc = JdbcReader(spark, scratch_mysql.db, 2, 1000)
    archive = ArchiveReader(spark, str(tmp_path / "archive"))

    def totals(out: str, with_archive: bool) -> dict:
        request = ReportRequest(
            window, str(tmp_path / out), utcnow(), default_thresholds(5, 60, 30, 30)
        )
        with Progress(None, total_steps=STEPS, enabled=False) as progress:
            summary = run_report(spark, jdbc, archive if with_archive else None, request, progress)
        return summary["totals"]

    before = totals("before", with_archive=False)
    with pytest.raises(Crash):  # archived but not yet deleted: the rows are in both places
        run_archive(
            spark,
            scratch_mysql.db,
            _request(tmp_path / "archive"),
            checkpoint=_crash_at("published"),
        )
    assert totals("overlap", with_archive=True) == before
    run_archive(spark, scratch_mysql.db, _request(tmp_path / "archive"))
    assert totals("after", with_archive=True) == before


def test_partition_check_detects_duplicates_missing_and_altered_rows(spark):
    rows = [("a", "2026-01-01", 1), ("b", "2026-01-01", 2), ("c", "2026-01-02", 3)]
    schema = "id string, date string, value int"
    good = partition_stats(spark.createDataFrame(rows, schema))
    assert compare(good, good) == []
    duplicated = partition_stats(spark.createDataFrame([*rows, rows[0]], schema))
    missing = partition_stats(spark.createDataFrame(rows[1:], schema))
    altered = partition_stats(spark.createDataFrame([("a", "2026-01-01", 9), *rows[1:]], schema))
    for bad in (duplicated, missing, altered):
        problems = compare(good, bad)
        assert len(problems) == 1
        assert "2026-01-01" in problems[0]


def test_a_column_added_by_a_later_migration_is_archived_too(
    spark, scratch_mysql, seeded, tmp_path
):
    ids, _, _ = seeded
    with scratch_mysql.engine.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE transactions ADD COLUMN operator_note VARCHAR(40)")
        conn.exec_driver_sql(
            "UPDATE transactions SET operator_note = 'refunded by hand' WHERE id = %s",
            (sorted(ids["old"])[0],),
        )
    original_tx, original_ev = _db_rows(scratch_mysql)

    run_archive(spark, scratch_mysql.db, _request(tmp_path))

    _assert_lossless(spark, scratch_mysql, tmp_path, original_tx, original_ev, ids["old"])


def test_every_column_of_the_models_is_archived_with_its_own_type():
    # A column the archive does not know is kept as text: lossless, but not the column's type.
    # A migration that adds a column should teach the archive its type.
    from relay_core.db.models import TRANSACTION_EVENTS, TRANSACTIONS
    from relay_pipeline.archive.repository import (
        _KNOWN_LATER,
        EVENT_SCHEMA,
        TRANSACTION_SCHEMA,
    )

    known = {f.name for f in TRANSACTION_SCHEMA.fields} | set(_KNOWN_LATER)
    assert set(TRANSACTIONS.columns.keys()) <= known
    assert set(TRANSACTION_EVENTS.columns.keys()) <= {f.name for f in EVENT_SCHEMA.fields}
