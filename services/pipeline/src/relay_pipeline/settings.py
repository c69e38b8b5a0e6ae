"""relay-pipeline settings: env prefix ``RELAY_PIPELINE_``, infrastructure locations unprefixed."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from relay_core.settings import InfraSettings


class PipelineSettings(InfraSettings):
    model_config = SettingsConfigDict(
        env_prefix="RELAY_PIPELINE_", extra="ignore", populate_by_name=True
    )

    spark_master: str = Field(
        "local[*]", description="Spark master URL (local[*], yarn, k8s://...)"
    )
    mariadb_jar: str = Field(
        "/usr/share/java/mariadb-java-client.jar",
        description="JDBC driver for mysql:// URLs (Debian libmariadb-java); empty: on classpath",
    )
    sqlite_jar: str = Field(
        "/usr/share/java/sqlite-jdbc.jar",
        description="JDBC driver for sqlite:// URLs (Debian libxerial-sqlite-jdbc-java)",
    )
    jdbc_partitions: int = Field(
        8, ge=1, le=1024, description="parallel JDBC reads per table (time slices of the window)"
    )
    jdbc_fetch_size: int = Field(10_000, ge=10, description="rows per JDBC round trip")
    shuffle_partitions: int = Field(16, ge=1, description="spark.sql.shuffle.partitions")

    # Anomaly thresholds.
    enqueue_grace_min: float = Field(
        5.0, gt=0, description="a pending row never enqueued for this long is an anomaly"
    )
    stale_inflight_min: float = Field(
        30.0, gt=0, description="submitted/mined with no update for this long is an anomaly"
    )
    processing_grace_s: float = Field(
        30.0, ge=0, description="added to the queue visibility timeout before a claim is stuck"
    )
    fee_spike_factor: float = Field(
        5.0,
        gt=1,
        description="a client whose fees in an hour exceed this many times its median hour "
        "(over the report's hours in which it paid fees) is an anomaly (fee_spike)",
    )
    fee_spike_min_hours: int = Field(
        12, ge=1, description="hours with fees a client needs in the window to be judged for spikes"
    )
    anomaly_limit: int = Field(1000, ge=1, description="anomalies listed in summary.json")

    # Archive.
    archive_delete_batch: int = Field(
        1000, ge=1, le=50_000, description="transactions deleted per DB transaction"
    )
