"""A client's fee spike: an hour above the factor times its median hour, judged exactly, and only
for a client with enough hours of fees."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from relay_pipeline.anomalies.service import fee_spikes
from relay_pipeline.report.job import default_thresholds

HOUR0 = datetime(2026, 3, 2)
NOW = HOUR0 + timedelta(days=1)
SCHEMA = "client_id string, hour timestamp, fee_wei decimal(38,0)"
# Past 2^64 and odd: a double cannot tell factor × BASE from one wei more.
BASE = 2**64 + 1


def _hours(client: str, fees: list[int]) -> list[tuple]:
    return [(client, HOUR0 + timedelta(hours=k), Decimal(fee)) for k, fee in enumerate(fees)]


def _spikes(spark, rows: list[tuple], factor: float = 5, min_hours: int = 12) -> set:
    thresholds = default_thresholds(
        5, 60, 30, 30, fee_spike_factor=factor, fee_spike_min_hours=min_hours
    )
    found = fee_spikes(spark.createDataFrame(rows, SCHEMA), NOW, thresholds).collect()
    return {(row["client_id"], row["hour"].hour) for row in found}


def test_an_hour_above_factor_times_the_median_hour_is_a_spike_and_one_at_it_is_not(spark):
    # Eleven ordinary hours and a last one: the median hour is BASE (a mean would be 1.33 × BASE
    # and hide the spike of 5 × BASE + 1).
    above = _hours("above", [BASE] * 11 + [5 * BASE + 1])
    at = _hours("at", [BASE] * 11 + [5 * BASE])

    assert _spikes(spark, above + at) == {("above", 11)}


def test_a_fractional_factor_is_applied_exactly(spark):
    rows = _hours("above", [BASE] * 11 + [5 * BASE // 2 + 1]) + _hours("at", [2] * 11 + [5])

    assert _spikes(spark, rows, factor=2.5) == {("above", 11)}


def test_a_client_with_too_few_hours_of_fees_is_not_judged(spark):
    few = _hours("few", [BASE] * 10 + [100 * BASE])  # 11 hours
    enough = _hours("enough", [BASE] * 11 + [100 * BASE])  # 12 hours

    assert _spikes(spark, few + enough) == {("enough", 11)}


def test_a_spike_names_its_client_and_hour_and_no_transaction(spark):
    rows = _hours("client-a", [BASE] * 11 + [6 * BASE])
    thresholds = default_thresholds(5, 60, 30, 30, fee_spike_factor=5, fee_spike_min_hours=12)

    (row,) = fee_spikes(spark.createDataFrame(rows, SCHEMA), NOW, thresholds).collect()

    assert (row["kind"], row["transaction_id"], row["status"]) == ("fee_spike", None, None)
    assert row["hour"] == HOUR0 + timedelta(hours=11)
    assert row["age_minutes"] == 13 * 60
    assert row["detail"] == (
        "fees 110.680464 ETH in the hour, 6.0× the client's median hour (18.446744 ETH over "
        "12 hours with fees; threshold 5×)"
    )
