"""Anomaly scan: transactions an operator has to look at, listed with their ids.

- ``never_enqueued``: accepted (``pending``, ``enqueued_at`` NULL) for longer than the grace —
  the outbox sweeper is not catching up.
- ``stuck_processing``: claimed and not moved for longer than the queue visibility timeout plus
  a grace — the reaper is not returning stale claims.
- ``stale_inflight``: ``submitted``/``mined`` without an update for longer than the threshold —
  the status tracker or the executor's webhooks have stopped.
- ``trail_mismatch``: the event trail does not agree with the row (no events for a row past
  ``pending``, last event ending elsewhere than the row's status, a gap in the chain).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

KINDS = ("never_enqueued", "stuck_processing", "stale_inflight", "trail_mismatch")
COLUMNS = (
    "kind",
    "transaction_id",
    "client_id",
    "type",
    "status",
    "created_at",
    "updated_at",
    "age_minutes",
    "detail",
)


@dataclass(frozen=True)
class Thresholds:
    enqueue_grace: timedelta
    processing_timeout: timedelta
    stale_inflight: timedelta


def scan(lifecycles: DataFrame, now: datetime, thresholds: Thresholds) -> DataFrame:
    """One row per (kind, transaction) found; ``lifecycles`` from ``history.lifecycle``."""
    at = F.lit(now)
    status = F.col("status")
    idle_minutes = (F.unix_micros(at) - F.unix_micros(F.col("updated_at"))) / 60e6
    age_minutes = (F.unix_micros(at) - F.unix_micros(F.col("created_at"))) / 60e6

    def found(kind: str, condition: Column, age: Column, detail: Column) -> Column:
        return F.when(
            condition,
            F.struct(
                F.lit(kind).alias("kind"),
                F.round(age, 1).alias("age_minutes"),
                detail.alias("detail"),
            ),
        )

    never_enqueued = found(
        "never_enqueued",
        (status == "pending")
        & F.col("enqueued_at").isNull()
        & (F.col("created_at") < F.lit(now - thresholds.enqueue_grace)),
        age_minutes,
        F.lit("accepted but never handed to the queue"),
    )
    stuck_processing = found(
        "stuck_processing",
        (status == "processing")
        & (F.col("updated_at") < F.lit(now - thresholds.processing_timeout)),
        idle_minutes,
        F.format_string(
            "claimed, no change for %.1f min (visibility timeout %.0f s); attempts %d",
            idle_minutes,
            F.lit(thresholds.processing_timeout.total_seconds()),
            F.col("attempts"),
        ),
    )
    stale_inflight = found(
        "stale_inflight",
        status.isin("submitted", "mined")
        & (F.col("updated_at") < F.lit(now - thresholds.stale_inflight)),
        idle_minutes,
        F.format_string("%s, no update for %.1f min", status, idle_minutes),
    )
    has_events = F.col("event_count") > 0
    trail = found(
        "trail_mismatch",
        ((status != "pending") & ~has_events)
        | (has_events & ~F.col("last_event_status").eqNullSafe(status))
        | (has_events & ~F.col("first_event_from").eqNullSafe(F.lit("pending")))
        | F.col("trail_broken"),
        age_minutes,
        F.concat_ws(
            "; ",
            F.when(
                (status != "pending") & ~has_events, F.format_string("%s with no events", status)
            ),
            F.when(
                has_events & ~F.col("last_event_status").eqNullSafe(status),
                F.format_string("row is %s, last event is %s", status, F.col("last_event_status")),
            ),
            F.when(
                has_events & ~F.col("first_event_from").eqNullSafe(F.lit("pending")),
                F.format_string(
                    "first event leaves %s, not pending",
                    F.coalesce(F.col("first_event_from"), F.lit("NULL")),
                ),
            ),
            F.when(F.col("trail_broken"), F.lit("an event does not start where the last ended")),
        ),
    )
    # One pass over the (large, cached) input: every kind is tested on each row, and a row
    # yields one finding per kind it matches.
    findings = F.filter(
        F.array(never_enqueued, stuck_processing, stale_inflight, trail),
        lambda finding: finding.isNotNull(),
    )
    return (
        lifecycles.select("*", findings.alias("_found"))
        .where(F.size("_found") > 0)
        .select(
            F.explode("_found").alias("f"),
            F.col("id").alias("transaction_id"),
            "client_id",
            "type",
            "status",
            "created_at",
            "updated_at",
        )
        .select(
            "f.kind",
            "transaction_id",
            "client_id",
            "type",
            "status",
            "created_at",
            "updated_at",
            "f.age_minutes",
            "f.detail",
        )
    )
