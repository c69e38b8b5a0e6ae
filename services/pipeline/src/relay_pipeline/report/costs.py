"""What the window's transactions cost: fees per hour × type × speed × client, fees and value
moved per client, and each relayer wallet's spend per day.

A transaction paid a fee when the cost from its receipt is recorded (``gas_used`` and
``fee_wei``); the ``"0"`` the consumer writes for a reserved transaction that was never sent is
no payment and is not counted. Value moved is the request's ``value`` of confirmed direct
transactions. Everything is counted by accept hour, like the rest of the report, and the
relayer's day is the UTC day of that hour: the three tables add up to the same totals.

Wei amounts are DECIMAL(38,0), exact up to 10^38 − 1 wei (10^20 ether; one fee of 10^21 wei
fits 10^17 times over). A sum that would pass that is NULL (``try_sum``), never wrapped or
rounded, and so is every total built on it. A mean is rounded to the nearest wei (NULL from
10^32 wei). Amounts the database holds that do not parse into that range are in no sum and are
counted in ``amounts_unreadable``.

Every table is a sum over one small cube (hour × type × speed × client × relayer), built in a
single pass over the transactions; the report builds it finer still (× attempts × status ×
failure reason, over every transaction) so that the same pass gives the outcome counts too.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from relay_pipeline.history.lifecycle import WEI
from relay_pipeline.report.service import GROUP

CUBE = (*GROUP, "relayer")
# What the outcome counts add to the cube's cells (``cost_cube(..., outcomes=True)``).
OUTCOME = ("attempts", "status", "failure_reason")


def _paid() -> Column:
    return F.col("gas_used").isNotNull() & F.col("fee_wei").isNotNull()


def _moved() -> Column:
    direct = F.col("type") == "direct"
    return direct & (F.col("status") == "confirmed") & F.col("value_wei").isNotNull()


def cost_cube(lifecycles: DataFrame, *, outcomes: bool = False) -> DataFrame:
    """Fees, gas and value moved per hour × type × speed × client × relayer.

    With ``outcomes``, per attempts × status × failure reason too and over every transaction,
    each cell counting its ``transactions``: the outcome counts the attempts and failure-reason
    tables are sums of (``report.service``), and, once ``paid_cells`` has dropped the cells
    without a cost, a finer cube with the same sums, in the same pass."""
    paid, moved = _paid(), _moved()
    rows, keys = lifecycles, [*CUBE, *OUTCOME]
    counts = [F.count(F.lit(1)).alias("transactions")]
    if not outcomes:  # only the transactions that count in a cost
        rows, keys, counts = (
            lifecycles.where(paid | moved | F.col("amount_unreadable")),
            [*CUBE],
            [],
        )
    return rows.groupBy(*keys).agg(
        *counts,
        F.sum(paid.cast("long")).alias("fee_transactions"),
        F.try_sum(F.when(paid, F.col("fee_wei"))).alias("fee_wei"),
        F.max(F.when(paid, F.col("fee_wei"))).alias("fee_max_wei"),
        F.sum(F.when(paid, F.col("gas_used"))).alias("gas_used"),
        F.sum(moved.cast("long")).alias("value_transactions"),
        F.try_sum(F.when(moved, F.col("value_wei"))).alias("value_wei"),
        F.sum(F.col("amount_unreadable").cast("long")).alias("amounts_unreadable"),
    )


def paid_cells(cube: DataFrame) -> DataFrame:
    """The cells of a cube with outcomes that hold a fee, a value moved or an unreadable amount:
    each table below sums them as it sums ``cost_cube`` (the transactions they also hold add
    nothing to a sum, and a group no such transaction falls in has no cell left)."""
    return cube.where(
        (F.col("fee_transactions") > 0)
        | (F.col("value_transactions") > 0)
        | (F.col("amounts_unreadable") > 0)
    )


def _total(amount: str, count: str) -> Column:
    """The exact sum of per-group wei sums: 0 over groups that have none, NULL when a part
    overflowed (a NULL sum over a group that has some) or the total does."""
    overflowed = F.max((F.col(amount).isNull() & (F.col(count) > 0)).cast("int")) == 1
    # try_sum is NULL both over no parts and past the range: only the first is 0.
    some = F.max(F.col(amount).isNotNull().cast("int")) == 1
    return F.when(~overflowed, F.when(some, F.try_sum(amount)).otherwise(F.lit(0).cast(WEI)))


def _mean(total: str, count: str) -> Column:
    return F.when(F.col(count) > 0, F.round(F.try_divide(F.col(total), F.col(count)), 0).cast(WEI))


def _fee_sums() -> list[Column]:
    return [
        F.sum("fee_transactions").alias("fee_transactions"),
        _total("fee_wei", "fee_transactions").alias("fee_wei"),
        F.max("fee_max_wei").alias("fee_max_wei"),
        F.coalesce(F.sum("gas_used"), F.lit(0)).alias("gas_used"),
    ]


def fees_hourly(cube: DataFrame) -> DataFrame:
    """Fees paid per hour × type × speed × client (groups that paid any)."""
    return (
        cube.groupBy(*GROUP)
        .agg(*_fee_sums())
        .where(F.col("fee_transactions") > 0)
        .select(
            *GROUP,
            "fee_transactions",
            "fee_wei",
            _mean("fee_wei", "fee_transactions").alias("fee_mean_wei"),
            "fee_max_wei",
            "gas_used",
        )
    )


def client_costs(cube: DataFrame) -> DataFrame:
    """Per client over the window: fees paid and value moved."""
    return (
        cube.groupBy("client_id")
        .agg(
            *_fee_sums(),
            F.sum("value_transactions").alias("value_transactions"),
            _total("value_wei", "value_transactions").alias("value_wei"),
            F.sum("amounts_unreadable").alias("amounts_unreadable"),
        )
        .select(
            "client_id",
            "fee_transactions",
            "fee_wei",
            _mean("fee_wei", "fee_transactions").alias("fee_mean_wei"),
            "fee_max_wei",
            "gas_used",
            "value_transactions",
            "value_wei",
            "amounts_unreadable",
        )
    )


def relayer_spend(cube: DataFrame) -> DataFrame:
    """Fees each relayer wallet paid per UTC day (``relayer`` NULL: sent before the relayer
    pool, by the one relayer of ``RELAY_EXECUTOR_RELAYER_ID``)."""
    return (
        cube.where(F.col("fee_transactions") > 0)
        .groupBy(F.to_date("hour").alias("day"), "relayer")
        .agg(*_fee_sums())
    )


def client_hours(fees: DataFrame) -> DataFrame:
    """Each client's fees per hour in which it paid any, from ``fees_hourly`` (or the cube):
    what the fee-spike scan compares."""
    return (
        fees.where(F.col("fee_transactions") > 0)
        .groupBy("client_id", "hour")
        .agg(
            F.sum("fee_transactions").alias("fee_transactions"),
            _total("fee_wei", "fee_transactions").alias("fee_wei"),
        )
    )


def wei_text(amount: Decimal | int | None) -> str | None:
    """A wei amount for JSON: exact decimal text (a JSON number past 2^53 is not exact)."""
    return None if amount is None else str(int(amount))


def by_client(costs: DataFrame) -> list[dict[str, Any]]:
    rows = costs.orderBy(F.desc_nulls_first("fee_wei"), "client_id").collect()
    return [
        {
            "client_id": row["client_id"],
            "fee_transactions": int(row["fee_transactions"]),
            "fee_wei": wei_text(row["fee_wei"]),
            "fee_mean_wei": wei_text(row["fee_mean_wei"]),
            "fee_max_wei": wei_text(row["fee_max_wei"]),
            "gas_used": int(row["gas_used"]),
            "value_transactions": int(row["value_transactions"]),
            "value_wei": wei_text(row["value_wei"]),
            "amounts_unreadable": int(row["amounts_unreadable"]),
        }
        for row in rows
    ]


def totals(costs: DataFrame) -> dict[str, Any]:
    row = costs.agg(
        F.coalesce(F.sum("fee_transactions"), F.lit(0)).alias("fee_transactions"),
        _total("fee_wei", "fee_transactions").alias("fee_wei"),
        F.coalesce(F.sum("gas_used"), F.lit(0)).alias("gas_used"),
        F.coalesce(F.sum("value_transactions"), F.lit(0)).alias("value_transactions"),
        _total("value_wei", "value_transactions").alias("value_wei"),
        F.coalesce(F.sum("amounts_unreadable"), F.lit(0)).alias("amounts_unreadable"),
    ).first()
    assert row is not None  # a global aggregate has one row
    return {
        "fee_transactions": int(row["fee_transactions"]),
        "fee_wei": wei_text(row["fee_wei"]),
        "gas_used": int(row["gas_used"]),
        "value_transactions": int(row["value_transactions"]),
        "value_wei": wei_text(row["value_wei"]),
        "amounts_unreadable": int(row["amounts_unreadable"]),
    }


def spend_per_day(spend: DataFrame) -> list[dict[str, Any]]:
    rows = spend.orderBy("day", F.asc_nulls_first("relayer")).collect()
    return [
        {
            "day": row["day"].isoformat(),
            "relayer": row["relayer"],
            "fee_transactions": int(row["fee_transactions"]),
            "fee_wei": wei_text(row["fee_wei"]),
            "gas_used": int(row["gas_used"]),
        }
        for row in rows
    ]


def fees_per_hour(fees: DataFrame) -> list[dict[str, Any]]:
    """Fees per hour and speed, for the chart."""
    rows = fees.groupBy("hour", "speed").agg(*_fee_sums()).orderBy("hour", "speed").collect()
    return [
        {
            "hour": row["hour"].isoformat(),
            "speed": row["speed"],
            "fee_transactions": int(row["fee_transactions"]),
            "fee_wei": wei_text(row["fee_wei"]),
        }
        for row in rows
    ]
