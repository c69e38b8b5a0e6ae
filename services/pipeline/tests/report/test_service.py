"""Per-group percentiles of the hourly table against nearest rank computed in Python."""

from __future__ import annotations

import random
from datetime import datetime
from fractions import Fraction

from relay_pipeline.history.lifecycle import STAGES
from relay_pipeline.report import service

HOUR = datetime(2026, 3, 2, 10)
SCHEMA = ", ".join(
    [
        "hour timestamp, type string, speed string, client_id string, status string",
        "reached_submitted boolean, dead_lettered boolean",
        *(f"{name} double" for name, _, _ in STAGES),
    ]
)
FIRST, LAST = STAGES[0][0], STAGES[-1][0]


def _nearest_rank(samples: list[float], p: float) -> float:
    """By definition: the smallest sample with at least p of the samples at or below it."""
    ordered = sorted(samples)
    return next(
        value
        for at_or_below, value in enumerate(ordered, 1)
        if Fraction(at_or_below, len(ordered)) >= Fraction(str(p))
    )


def _row(client: str, durations: list[float | None]) -> tuple:
    return (HOUR, "direct", "fast", client, "confirmed", True, False, *durations)


def test_hourly_percentiles_are_exact_nearest_rank_for_every_group_size(spark):
    rng = random.Random(7)
    sizes = (1, 2, 3, 19, 20, 21, 99, 100, 101, 250, 1_000, 12_345)
    samples = {n: [round(rng.uniform(0, 5_000), 3) for _ in range(n)] for n in sizes}
    rows = []
    for n, values in samples.items():
        for index, value in enumerate(values):
            # Every other transaction never confirmed: its end-to-end time is no sample.
            end_to_end = None if index % 2 else value
            rows.append(_row(f"client-{n}", [value] * (len(STAGES) - 1) + [end_to_end]))

    table = {
        row["client_id"]: row
        for row in service.hourly(spark.createDataFrame(rows, SCHEMA)).collect()
    }

    for n, values in samples.items():
        row = table[f"client-{n}"]
        for label, p in service.PERCENTILES:
            assert row[f"{FIRST}_{label}_ms"] == _nearest_rank(values, p), (n, label)
            assert row[f"{LAST}_{label}_ms"] == _nearest_rank(values[::2], p), (n, label)


def test_hourly_percentile_of_a_stage_nobody_reached_is_null(spark):
    frame = spark.createDataFrame([_row("client-a", [None] * len(STAGES))], SCHEMA)

    row = service.hourly(frame).first()

    assert row is not None
    assert row["accepted"] == 1
    assert all(
        row[f"{name}_{label}_ms"] is None
        for name, _, _ in STAGES
        for label, _ in service.PERCENTILES
    )


def test_window_percentiles_are_exact_nearest_rank_whatever_the_row_order(spark):
    rng = random.Random(11)
    # Heavy ties (a narrow band), a long tail, negatives (an event before its transaction) and
    # more samples than percentile_approx's 10 000 exact ones.
    values = (
        [round(rng.gauss(144_000, 3_000), 3) for _ in range(30_000)]
        + [round(rng.expovariate(1 / 50_000), 1) for _ in range(8_000)]
        + [float(rng.randint(-500, 0)) for _ in range(300)]
        + [150_000.0] * 700
    )
    # The second stage negated: ranks counted from the other end, through the sign.
    rows = [
        _row("client-a", [value, -value] + [value] * (len(STAGES) - 3) + [None]) for value in values
    ]
    frame = spark.createDataFrame(rows, SCHEMA)
    shuffled = frame.repartition(7, "accept_to_claim").sortWithinPartitions(FIRST, ascending=False)

    tables = [
        {row["stage"]: row for row in service.stage_latency(df).collect()}
        for df in (frame.coalesce(1), shuffled)
    ]

    negated = [-value for value in values]
    for table in tables:
        assert list(table) == [name for name, _, _ in STAGES]
        assert table[FIRST]["samples"] == len(values)
        for label, p in service.PERCENTILES:
            assert table[FIRST][f"{label}_ms"] == _nearest_rank(values, p), label
            assert table[STAGES[1][0]][f"{label}_ms"] == _nearest_rank(negated, p), label
        # Nobody confirmed: no sample, no percentile.
        assert table[LAST]["samples"] == 0
        assert table[LAST]["p50_ms"] is None
