"""The SparkSession: one per process, configured the same way on a laptop and on a cluster."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

from pyspark.sql import SparkSession

from relay_pipeline.database import MARIADB_DRIVER, SQLITE_DRIVER
from relay_pipeline.settings import PipelineSettings

# Naive UTC DATETIME values must reach Spark unshifted: the JDBC drivers convert through the
# JVM's default zone and Spark renders through the session zone, so both are pinned to UTC.
UTC_JAVA_OPTIONS = "-Duser.timezone=UTC"


def driver_jars(settings: PipelineSettings) -> list[str]:
    """The JDBC driver jars that exist here (missing ones are expected on the classpath)."""
    jars = []
    for jar in (settings.mariadb_jar, settings.sqlite_jar):
        if jar and Path(jar).is_file():
            jars.append(str(Path(jar).resolve()))
    return jars


class MissingDependency(ValueError):
    """Spark cannot start, or cannot read the database, on this machine: said before it tries
    (a JVM's stack trace names a class, not what to install)."""


INSTALL_HINT = "run `make pipeline-deps` in a checkout (it installs {package} with apt)"


def check_dependencies(settings: PipelineSettings, driver: str | None) -> None:
    """Raise :class:`MissingDependency` naming what is missing and the command that installs
    it: a JVM, or the JDBC driver jar the database needs (``driver``: its class; None when no
    database is read). Under spark-submit the cluster provides both."""
    if launched_by_spark_submit():
        return
    java_home = os.environ.get("JAVA_HOME")
    if shutil.which("java") is None and not (
        java_home and Path(java_home, "bin", "java").is_file()
    ):
        raise MissingDependency(
            "no Java runtime (Spark runs on a JVM): "
            + INSTALL_HINT.format(package="default-jre-headless")
            + ", or set JAVA_HOME"
        )
    needed = {
        MARIADB_DRIVER: (settings.mariadb_jar, "libmariadb-java", "MARIADB_JAR"),
        SQLITE_DRIVER: (settings.sqlite_jar, "libxerial-sqlite-jdbc-java", "SQLITE_JAR"),
    }.get(driver or "")
    if needed is None:
        return
    jar, package, setting = needed
    if jar and not Path(jar).is_file():  # an empty setting: the jar is on the classpath
        raise MissingDependency(
            f"the JDBC driver {driver} is not installed ({jar} is missing): "
            + INSTALL_HINT.format(package=package)
            + f", or set RELAY_PIPELINE_{setting} to where the jar is"
        )


LOOPBACK = "127.0.0.1"
_LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "[::1]", "::1"}


def on_loopback(master: str) -> bool:
    """``local[…]``, or a standalone master on this machine's loopback (``spark://127.0.0.1:P``,
    as ``make pipeline-cluster`` starts)."""
    if master.startswith("local"):
        return True
    if not master.startswith("spark://"):
        return False
    hosts = [part.rsplit(":", 1)[0] for part in master[len("spark://") :].split(",")]
    return all(host in _LOOPBACK_HOSTS for host in hosts)


def launched_by_spark_submit() -> bool:
    """True when spark-submit started this Python process (it then owns master and jars)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_session(
    settings: PipelineSettings,
    *,
    app_name: str = "relay-pipeline",
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    extra_jars: Iterable[str] = (),
) -> SparkSession:
    """Get or create the process's SparkSession.

    Under ``spark-submit`` the master and jars given there win; ``--master``/settings only
    apply when this process starts Spark itself.
    """
    builder = SparkSession.builder.appName(app_name)
    chosen = master or settings.spark_master
    if not launched_by_spark_submit():
        builder = builder.master(chosen)
        # On a cluster the driver serves these to every executor (they need not be installed
        # there), as spark-submit's --jars would.
        jars = [*driver_jars(settings), *extra_jars]
        if jars:
            builder = builder.config("spark.jars", ",".join(jars))
        if on_loopback(chosen):
            # Embedded mode, or a cluster on this machine's loopback: keep every socket there.
            # For any other master the driver must be reachable from the executors, so its
            # address is left to Spark (SPARK_LOCAL_IP / spark.driver.host when it guesses
            # wrong).
            os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
            builder = builder.config("spark.driver.host", LOOPBACK).config(
                "spark.driver.bindAddress", LOOPBACK
            )
    defaults = {
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": UTC_JAVA_OPTIONS,
        "spark.executor.extraJavaOptions": UTC_JAVA_OPTIONS,
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        "spark.sql.adaptive.enabled": "true",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.sources.partitionOverwriteMode": "dynamic",
        "spark.sql.parquet.compression.codec": "zstd",
        # Readable by every Parquet tool (Arrow, Athena, DuckDB), microseconds kept.
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    }
    for key, value in {**defaults, **(conf or {})}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
