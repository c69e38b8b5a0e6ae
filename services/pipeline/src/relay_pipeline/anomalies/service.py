"""Anomaly scan: transactions an operator has to look at, listed with their ids.

- ``never_enqueued``: accepted (``pending``, ``enqueued_at`` NULL) for longer than the grace —
  the outbox sweeper is not catching up.
- ``stuck_processing``: claimed and not moved for longer than the queue visibility timeout plus
  a grace — the reaper is not returning stale claims.
- ``stale_inflight``: ``submitted``/``mined`` without an update for longer than the threshold —
  the status tracker or the executor's webhooks have stopped.
- ``trail_mismatch``: the event trail does not agree with the row (no events for a row past
  ``pending``, last event ending elsewhere than the row's status, a gap in the chain).
- ``fee_spike``: a client paid more fees in one hour than ``fee_spike_factor`` times its usual
  hour — a client, not a transaction: listed with its client and hour, no transaction id.

Every finding has an ``hour``: the transaction's accept hour, or the hour of the fee spike.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from fractions import Fraction

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

KINDS = ("never_enqueued", "stuck_processing", "stale_inflight", "trail_mismatch", "fee_spike")
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
    "hour",
)


@dataclass(frozen=True)
class Thresholds:
    enqueue_grace: timedelta
    processing_timeout: timedelta
    stale_inflight: timedelta
    # An hour's fees above this many times the client's median hour are a spike, for a client
    # that paid fees in at least ``fee_spike_min_hours`` hours of the window.
    fee_spike_factor: float
    fee_spike_min_hours: int


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
            "hour",
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
            "hour",
        )
    )


def fee_spikes(client_hours: DataFrame, now: datetime, thresholds: Thresholds) -> DataFrame:
    """Hours in which a client paid more than ``fee_spike_factor`` × its usual hourly fees.

    ``client_hours``: one row per client and hour in which it paid fees (``client_id``,
    ``hour``, ``fee_wei``). A client's usual hour is the median of those hours (nearest rank:
    the ⌈n/2⌉-th smallest), over the window and the spike hours included — a median that a few
    spikes do not move. With fewer than ``fee_spike_min_hours`` such hours a client has no usual
    yet and is not judged. The comparison is exact: ``fee × q > median × p`` for the factor
    p/q in lowest terms; a product past 10^38 wei is NULL and judges nothing.
    """
    factor = Fraction(str(thresholds.fee_spike_factor))
    paid = client_hours.where(F.col("fee_wei").isNotNull())
    usual = (
        paid.groupBy("client_id")
        .agg(F.array_sort(F.collect_list("fee_wei")).alias("_fees"))
        .select(
            "client_id",
            F.size("_fees").alias("_hours"),
            F.element_at("_fees", ((F.size("_fees") + 1) / 2).cast("int")).alias("_usual"),
        )
        .where(F.col("_hours") >= thresholds.fee_spike_min_hours)
    )
    spikes = paid.join(usual, "client_id").where(
        F.try_multiply(F.col("fee_wei"), F.lit(factor.denominator))
        > F.try_multiply(F.col("_usual"), F.lit(factor.numerator))
    )
    fee, usual_fee = F.col("fee_wei").cast("double"), F.col("_usual").cast("double")
    return spikes.select(
        F.lit("fee_spike").alias("kind"),
        F.lit(None).cast("string").alias("transaction_id"),
        "client_id",
        F.lit(None).cast("string").alias("type"),
        F.lit(None).cast("string").alias("status"),
        F.lit(None).cast("timestamp").alias("created_at"),
        F.lit(None).cast("timestamp").alias("updated_at"),
        F.round((F.unix_micros(F.lit(now)) - F.unix_micros(F.col("hour"))) / 60e6, 1).alias(
            "age_minutes"
        ),
        F.format_string(
            "fees %s ETH in the hour, %.1f× the client's median hour (%s ETH over %d hours "
            "with fees; threshold %s×)",
            F.format_number(fee / 1e18, 6),
            F.try_divide(fee, usual_fee),
            F.format_number(usual_fee / 1e18, 6),
            F.col("_hours"),
            F.lit(f"{thresholds.fee_spike_factor:g}"),
        ).alias("detail"),
        "hour",
    )
