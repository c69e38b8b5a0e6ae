"""The command line on the embedded setup: seed a SQLite file, report on it, scan it."""

from __future__ import annotations

import json
import sqlite3

import pytest

from relay_pipeline.cli import EXIT_ANOMALIES, _attach_relative_times, build_parser, main

END = "2026-03-01T00:00:00"


@pytest.fixture
def seeded_sqlite(tmp_path, spark):
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    assert main(["seed", "--rows", "400", "--days", "1", "--end", END, "--database-url", url,
                 "--anomaly-rate", "0.05", "--quiet"]) == 0  # fmt: skip
    return url, tmp_path / "relay.db"


def test_report_command_on_sqlite_counts_what_the_database_holds(seeded_sqlite, tmp_path, capsys):
    url, path = seeded_sqlite
    out = tmp_path / "report"
    code = main(
        ["report", "--database-url", url, "--since", "2026-02-28", "--until", END,
         "--now", END, "--out", str(out), "--quiet"]
    )  # fmt: skip
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    with sqlite3.connect(path) as conn:
        by_status = dict(conn.execute("SELECT status, COUNT(*) FROM transactions GROUP BY status"))
        dlq = conn.execute(
            "SELECT COUNT(DISTINCT transaction_id) FROM transaction_events "
            "WHERE source = 'consumer.dlq'"
        ).fetchone()[0]
    totals = summary["totals"]
    assert totals["accepted"] == 400 == sum(by_status.values())
    assert totals["confirmed"] == by_status.get("confirmed", 0)
    assert totals["failed"] == by_status.get("failed", 0)
    assert totals["dead_lettered"] == dlq
    assert summary["inputs"]["database"].startswith("sqlite:")
    assert (out / "report.html").stat().st_size > 10_000
    for table in ("hourly", "attempts", "failure_reasons", "stage_latency", "anomalies"):
        assert list((out / table).glob("*.parquet")), table
    assert "report: 400 accepted" in capsys.readouterr().out


def test_anomalies_command_lists_ids_and_can_fail_the_run(seeded_sqlite, capsys):
    url, path = seeded_sqlite
    args = ["anomalies", "--database-url", url, "--since", "2026-02-28", "--until", END,
            "--now", END, "--quiet"]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    with sqlite3.connect(path) as conn:
        (never_enqueued,) = conn.execute(
            "SELECT id FROM transactions WHERE enqueued_at IS NULL AND status = 'pending' "
            "AND created_at < '2026-02-28 23:55' LIMIT 1"
        ).fetchone()
    assert f"never_enqueued    {never_enqueued}" in printed
    assert main([*args, "--fail-on-found"]) == EXIT_ANOMALIES


def test_bad_database_url_is_a_clear_error_not_a_traceback(capsys):
    assert main(["anomalies", "--database-url", "postgresql://u@h/db", "--quiet"]) == 2
    assert "unsupported database" in capsys.readouterr().err


def test_a_missing_jdbc_driver_or_jvm_is_named_with_the_command_that_installs_it(
    tmp_path, monkeypatch, capsys
):
    """Not a Java ClassNotFoundException: what is missing, and `make pipeline-deps`."""
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    monkeypatch.setenv("RELAY_PIPELINE_SQLITE_JAR", str(tmp_path / "nowhere" / "sqlite-jdbc.jar"))
    args = ["report", "--database-url", url, "--since", "2026-02-28", "--until", END,
            "--out", str(tmp_path / "out"), "--quiet"]  # fmt: skip
    assert main(args) == 2
    said = capsys.readouterr().err
    assert "org.sqlite.JDBC is not installed" in said
    assert "make pipeline-deps" in said
    assert "libxerial-sqlite-jdbc-java" in said
    monkeypatch.setenv("PATH", str(tmp_path))  # no java on it
    monkeypatch.delenv("JAVA_HOME", raising=False)
    assert main(args) == 2
    said = capsys.readouterr().err
    assert "no Java runtime" in said
    assert "make pipeline-deps" in said


def test_a_relative_time_may_follow_its_option_as_the_next_argument():
    """`--since -7d`, as the docs write it, not only `--since=-7d` (argparse alone takes -7d
    for an option and stops with "expected one argument")."""
    args = build_parser().parse_args(
        _attach_relative_times(["report", "--since", "-7d", "--until", "-1h", "--out", "out"])
    )
    assert (args.since, args.until, args.out) == ("-7d", "-1h", "out")
