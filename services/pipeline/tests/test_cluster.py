"""The same report and archive on a Spark standalone cluster as on local[2].

A master and two workers (1 core, 1 GiB each) run on 127.0.0.1 from the installed pyspark
(relay_pipeline.localcluster); ``relay-pipeline report`` and ``archive`` run against them as
a user runs them (``--master spark://127.0.0.1:P``, a process of their own) and in-process on
local[2]. The executors fetch the JDBC driver from the driver (the pipeline passes it as
``spark.jars``) and run no Python: the cluster runs have ``PYSPARK_PYTHON`` pointing nowhere,
so a Python UDF added to the job would fail here.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from relay_pipeline import localcluster
from relay_pipeline.cli import main
from relay_pipeline.history.window import utcnow
from relay_pipeline.seed.service import seed_history
from relay_pipeline.spark import on_loopback

from .conftest import ScratchDatabase, scratch_database

TABLES = ("hourly", "attempts", "failure_reasons", "stage_latency", "anomalies")
# What differs between two runs of the same report by nature (and the database's name).
RUN_FIELDS = ("generated_at", "elapsed_s", "inputs")


def _seed(scratch: ScratchDatabase, now: Any) -> None:
    """History archived by --older-than 30d (40 to 32 days old) and history that stays (the
    last three days), with nothing between: the cutoff of two runs a minute apart splits
    them the same way."""
    old_end = now - timedelta(days=32)
    seed_history(scratch.db, rows=1500, start=old_end - timedelta(days=8), end=old_end, seed=7)
    recent_end = now - timedelta(minutes=30)
    seed_history(
        scratch.db, rows=1500, start=recent_end - timedelta(days=3), end=recent_end, seed=8
    )


def _on_cluster(master: str, args: list[str], log: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYSPARK_PYTHON": "/nonexistent/python-on-executors"}
    env.pop("SPARK_LOCAL_IP", None)  # the pipeline itself keeps a loopback master on loopback
    command = [sys.executable, "-m", "relay_pipeline", *args, "--master", master]
    command += ["--jdbc-partitions", "2", "--conf", "spark.ui.enabled=false"]
    # Small data: few shuffle partitions, and no waiting for a cached block's own executor
    # (each has one core) — half the time of Spark's defaults here, the same results.
    command += ["--conf", "spark.sql.shuffle.partitions=2", "--conf", "spark.locality.wait=0s"]
    command += ["--quiet"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    log.write_text(done.stdout + done.stderr)
    assert done.returncode == 0, done.stderr[-4000:]
    return done


def _locally(args: list[str]) -> None:
    code = main([*args, "--master", "local[2]", "--jdbc-partitions", "2", "--quiet"])
    assert code == 0


def _rows(spark: Any, path: Path) -> list[tuple[Any, ...]]:
    df = spark.read.parquet(str(path))
    return sorted((tuple(_plain(v) for v in row) for row in df.collect()), key=repr)


def _plain(value: Any) -> Any:
    if isinstance(value, float):  # sums of doubles may be added up in another order
        return round(value, 9) if math.isfinite(value) else value
    if isinstance(value, list):
        return tuple(_plain(v) for v in value)
    if hasattr(value, "asDict"):
        return tuple(sorted((k, _plain(v)) for k, v in value.asDict().items()))
    return value


def _summary(out: Path) -> dict[str, Any]:
    summary = json.loads((out / "summary.json").read_text())
    for name in RUN_FIELDS:
        summary.pop(name)
    return summary


def _manifests(root: Path) -> list[dict[str, Any]]:
    """Each run's partitions with their counts and checksums (file names are per run)."""
    return [
        json.loads(p.read_text())["partitions"] for p in sorted((root / "_runs").glob("*.json"))
    ]


def _left(scratch: ScratchDatabase) -> tuple[list[Any], list[Any]]:
    return (
        scratch.rows("SELECT id, status, updated_at FROM transactions ORDER BY id"),
        scratch.rows("SELECT id, transaction_id FROM transaction_events ORDER BY id"),
    )


@pytest.mark.parametrize(
    ("master", "loopback"),
    [
        ("local[2]", True),
        ("spark://127.0.0.1:7077", True),
        ("spark://localhost:7077,127.0.0.1:7078", True),
        ("spark://10.0.0.5:7077", False),
        ("spark://127.0.0.1:7077,10.0.0.5:7077", False),
        ("yarn", False),
        ("k8s://https://10.0.0.1:6443", False),
    ],
)
def test_only_a_local_or_loopback_master_keeps_the_driver_on_loopback(master, loopback):
    """Elsewhere the executors must reach the driver: its address is Spark's choice."""
    assert on_loopback(master) is loopback


@pytest.mark.cluster
@pytest.mark.timeout(600)
def test_report_and_archive_on_a_standalone_cluster_equal_the_local_run(spark, tmp_path, capsys):
    began = time.monotonic()
    now = utcnow().replace(microsecond=0)
    with scratch_database() as on_cluster, scratch_database() as on_local:
        _seed(on_cluster, now)
        _seed(on_local, now)
        before = _left(on_cluster)
        assert before == _left(on_local)  # same seed, same history

        window = ["--since", (now - timedelta(days=45)).isoformat(), "--until", now.isoformat()]
        window += ["--now", now.isoformat()]
        with localcluster.running(tmp_path / "cluster", workers=2, cores=1, memory="1g") as cl:
            started = time.monotonic()
            _on_cluster(
                cl.master_url,
                ["report", *window, "--out", str(tmp_path / "report-cluster"),
                 "--database-url", on_cluster.url],
                tmp_path / "report-cluster.log",
            )  # fmt: skip
            archived = _on_cluster(
                cl.master_url,
                ["archive", "--older-than", "30d", "--out", str(tmp_path / "archive-cluster"),
                 "--database-url", on_cluster.url],
                tmp_path / "archive-cluster.log",
            )  # fmt: skip
            on_cluster_s = time.monotonic() - started
            state = cl.state()
        # Both ran on the cluster's two executors, which fetched the JDBC driver jar from
        # the driver (nothing was installed on the workers).
        apps = {app["name"]: app for app in state["completedapps"]}  # type: ignore[attr-defined]
        assert {"relay-pipeline report", "relay-pipeline archive"} <= set(apps)
        assert all(app["cores"] == 2 for app in apps.values())
        fetched = list((tmp_path / "cluster" / "work").glob("*/app-*/*/mariadb-java-client.jar"))
        assert len(fetched) >= 2

        started = time.monotonic()
        _locally(["report", *window, "--out", str(tmp_path / "report-local"),
                  "--database-url", on_local.url])  # fmt: skip
        capsys.readouterr()
        _locally(["archive", "--older-than", "30d", "--out", str(tmp_path / "archive-local"),
                  "--database-url", on_local.url])  # fmt: skip
        archived_locally = json.loads(capsys.readouterr().out)
        local_s = time.monotonic() - started

        # The report: every figure of summary.json, and every table row for row.
        summary = _summary(tmp_path / "report-cluster")
        assert summary == _summary(tmp_path / "report-local")
        assert summary["totals"]["accepted"] == 3000
        assert set(TABLES) <= set(summary["tables"])
        for table in summary["tables"]:
            assert _rows(spark, tmp_path / "report-cluster" / table) == _rows(
                spark, tmp_path / "report-local" / table
            ), table

        # The archive: the same rows archived (counts and checksums per date and table), the
        # same rows, the same rows deleted from the database.
        result = json.loads(archived.stdout)
        for key in ("due", "written", "written_events", "deleted", "mismatched", "partitions"):
            assert result[key] == archived_locally[key], key
        assert result["written"] == result["deleted"] > 1000
        assert _manifests(tmp_path / "archive-cluster") == _manifests(tmp_path / "archive-local")
        for table in ("transactions", "transaction_events"):
            assert _rows(spark, tmp_path / "archive-cluster" / table) == _rows(
                spark, tmp_path / "archive-local" / table
            ), table
        left = _left(on_cluster)
        assert left == _left(on_local)
        assert len(left[0]) == len(before[0]) - result["deleted"]
    with capsys.disabled():
        sys.stderr.write(
            f"\ncluster test: report + archive on 2 workers {on_cluster_s:.1f} s, on local[2] "
            f"{local_s:.1f} s, whole test {time.monotonic() - began:.1f} s\n"
        )
