"""One row per transaction: its attributes, when it reached each stage, and its event trail.

Creation is not an event: a transaction is accepted at ``created_at``. Each later status change
is one event; a stage is reached at the first event into it, falling back to the row's own
timestamp (``claimed_at``, ``submitted_at``, ``confirmed_at``) for a row whose trail lacks it.

What a transaction cost comes from its receipt (``gas_used``, ``effective_gas_price``,
``fee_wei``; the relayer that sent it) and, for a direct request, the ``value`` it moves. Wei
amounts, decimal text in the database, become DECIMAL(38,0): exact up to 10^38 − 1 wei
(10^20 ether; a wei amount on chain is far below). Text that is no whole number in that range is
NULL, and the row says so in ``amount_unreadable`` rather than being summed as nothing.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DecimalType

TERMINAL = ("confirmed", "failed", "expired", "canceled")
DEAD_LETTER_SOURCE = "consumer.dlq"
NO_SPEED = "n/a"
WEI = DecimalType(38, 0)
# Added after the stage durations, so the columns before them keep their places.
COST_COLUMNS = (
    "relayer",
    "block_number",
    "gas_used",
    "effective_gas_price",
    "fee_wei",
    "value_wei",
    "amount_unreadable",
)

# (name, from column, to column) of each reported stage; durations are in milliseconds.
STAGES = (
    ("accept_to_claim", "created_at", "claim_time"),
    ("claim_to_submitted", "claim_time", "submitted_time"),
    ("submitted_to_mined", "submitted_time", "mined_time"),
    ("mined_to_confirmed", "mined_time", "confirmed_time"),
    ("end_to_end", "created_at", "confirmed_time"),
)


# Status codes and random odd weights for the trail check. Every aggregate over events is
# fixed-width, so Spark aggregates events in a hash map, partially before the shuffle.
STATUSES = (
    "pending",
    "processing",
    "submitted",
    "mined",
    "confirmed",
    "failed",
    "expired",
    "canceled",
)
_WEIGHTS = (
    0x5F3A9C1D2B7, 0x3C8E5A1F6D1, 0x7B2D4F9E3A5, 0x1E6C8B3D5F9,
    0x6A9F2C7E4B3, 0x2D5B8E1A7C9, 0x4F1E7B9C2D5, 0x58C3A6E2F17,
)  # fmt: skip


def _code(column: str) -> Column:
    out = F.lit(None).cast("int")
    for code, status in enumerate(STATUSES):
        out = F.when(F.col(column) == status, F.lit(code)).otherwise(out)
    return out


def _weight(column: str) -> Column:
    out = F.lit(0).cast("long")
    for status, weight in zip(STATUSES, _WEIGHTS, strict=True):
        out = F.when(F.col(column) == status, F.lit(weight)).otherwise(out)
    return out


def _status_of(code: Column) -> Column:
    return F.element_at(F.array(*(F.lit(s) for s in STATUSES)), code + 1)


def _first_into(status: str) -> Column:
    return F.min(F.when(F.col("to_status") == status, F.col("created_at")))


def event_summary(events: DataFrame) -> DataFrame:
    """Per transaction: first arrival in each stage, DLQ mark, and the trail's shape.

    The trail is a path when each event leaves the status the previous one entered, starting
    from ``pending``. Summed over a path, weight(to) − weight(from) telescopes to
    weight(last) − weight(pending); a missing, extra or misdirected transition breaks the
    equality (weights are random 40-bit numbers). Events merely stored out of id order are
    not detected.
    """
    return (
        events.groupBy("transaction_id")
        .agg(
            _first_into("processing").alias("ev_claim"),
            _first_into("submitted").alias("ev_submitted"),
            _first_into("mined").alias("ev_mined"),
            _first_into("confirmed").alias("ev_confirmed"),
            F.max((F.col("source") == DEAD_LETTER_SOURCE).cast("int")).alias("dead_lettered"),
            F.count(F.lit(1)).alias("event_count"),
            F.max_by(_code("to_status"), F.col("id")).alias("last_code"),
            F.min_by(_code("from_status"), F.col("id")).alias("first_from_code"),
            F.sum(_weight("to_status") - _weight("from_status")).alias("trail_sum"),
        )
        .select(
            "transaction_id",
            "ev_claim",
            "ev_submitted",
            "ev_mined",
            "ev_confirmed",
            "dead_lettered",
            "event_count",
            _status_of(F.col("last_code")).alias("last_event_status"),
            _status_of(F.col("first_from_code")).alias("first_event_from"),
            (
                F.col("trail_sum")
                != F.element_at(F.array(*(F.lit(w) for w in _WEIGHTS)), F.col("last_code") + 1)
                - F.lit(_WEIGHTS[0])
            ).alias("trail_broken"),
        )
    )


def lifecycles(transactions: DataFrame, events: DataFrame) -> DataFrame:
    """Join each transaction to its event summary; one row per transaction."""
    summary = event_summary(events)
    joined = transactions.join(
        summary, transactions["id"] == summary["transaction_id"], "left"
    ).drop("transaction_id")
    out = joined.select(
        "id",
        "client_id",
        "type",
        F.coalesce(F.col("speed"), F.lit(NO_SPEED)).alias("speed"),
        "status",
        F.coalesce(F.col("attempts"), F.lit(0)).alias("attempts"),
        "created_at",
        "updated_at",
        "enqueued_at",
        F.date_trunc("hour", F.col("created_at")).alias("hour"),
        F.coalesce(F.col("ev_claim"), F.col("claimed_at")).alias("claim_time"),
        F.coalesce(F.col("ev_submitted"), F.col("submitted_at")).alias("submitted_time"),
        F.col("ev_mined").alias("mined_time"),
        F.coalesce(F.col("ev_confirmed"), F.col("confirmed_at")).alias("confirmed_time"),
        F.coalesce(F.col("dead_lettered"), F.lit(0)).cast("boolean").alias("dead_lettered"),
        # The row's error is the reason the consumer or the tracker recorded when it failed.
        F.when(
            F.col("status").isin("failed", "expired"),
            F.coalesce(F.col("error"), F.lit("(no reason recorded)")),
        ).alias("failure_reason"),
        F.coalesce(F.col("event_count"), F.lit(0)).alias("event_count"),
        "last_event_status",
        "first_event_from",
        F.coalesce(F.col("trail_broken"), F.lit(False)).alias("trail_broken"),
        *_costs(),
    )
    stage_times = ("claim_time", "submitted_time", "mined_time", "confirmed_time")
    return out.select(
        *(c for c in out.columns if c not in stage_times and c not in COST_COLUMNS),
        F.col("submitted_time").isNotNull().alias("reached_submitted"),
        # Only durations are kept: the frame is cached, and narrower is faster.
        *(_millis_between(F.col(start), F.col(end)).alias(name) for name, start, end in STAGES),
        *COST_COLUMNS,
    )


def _wei(text: str) -> Column:
    return F.col(text).try_cast(WEI)


def _unreadable(text: str) -> Column:
    return F.col(text).isNotNull() & _wei(text).isNull()


def _costs() -> list[Column]:
    direct = F.col("type") == "direct"
    # Only a confirmed direct transaction's value is ever summed: an unreadable value elsewhere
    # (a request that failed for asking too much) takes nothing away from a figure.
    return [
        F.col("relayer"),
        F.col("block_number"),
        F.col("gas_used"),
        _wei("effective_gas_price").alias("effective_gas_price"),
        _wei("fee_wei").alias("fee_wei"),
        F.when(direct, _wei("value_wei")).alias("value_wei"),
        (
            _unreadable("fee_wei")
            | _unreadable("effective_gas_price")
            | (direct & (F.col("status") == "confirmed") & _unreadable("value_wei"))
        ).alias("amount_unreadable"),
    ]


def _millis_between(start: Column, end: Column) -> Column:
    return (F.unix_micros(end) - F.unix_micros(start)) / F.lit(1000.0)
