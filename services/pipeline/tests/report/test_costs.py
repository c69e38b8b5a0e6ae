"""Costs in the report, on a hand-made history whose every wei is computed by hand: fees per hour,
type, speed and client, fees and value moved per client, relayer spend per day. Several amounts
are above 2^64 (no 64-bit integer or double holds them exactly)."""

from __future__ import annotations

import json
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from relay_pipeline.history.repository import JdbcReader
from relay_pipeline.history.window import Window
from relay_pipeline.progress import Progress
from relay_pipeline.report.job import STEPS, ReportRequest, default_thresholds, run_report

from ..conftest import T0, HistoryBuilder

WINDOW = Window(T0, T0 + timedelta(hours=4))
HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)
Trail = list[tuple[str, float] | tuple[str, float, str, str | None]]
CONFIRMED: Trail = [("processing", 10), ("submitted", 10), ("mined", 10), ("confirmed", 10)]
REVERTED: Trail = [
    ("processing", 10),
    ("submitted", 10),
    ("failed", 10, "tracker.poll", "reverted"),
]
TWO_64 = 2**64
# 2^64 + 1 = 274 177 × 67 280 421 310 721: a receipt whose fee is just past 64 bits.
FEE_A1 = 274_177 * 67_280_421_310_721
FEE_A2 = 21_000 * (10**15 + 1)
FEE_A3 = 50_000 * 20 * 10**9
FEE_B = 100_000 * 10**9
SPIKE_BASE = 10**15
# The lifecycle columns a cost cube reads; a fee that fits DECIMAL(38,0) once, not twice.
CUBE_INPUT = (
    "hour timestamp, type string, speed string, client_id string, relayer string, "
    "status string, gas_used long, fee_wei decimal(38,0), value_wei decimal(38,0), "
    "amount_unreadable boolean"
)
HUGE = Decimal(6 * 10**37)


def _cost(relayer: str | None, gas: int, price: int, block: int = 24_000_000) -> dict:
    return {
        "relayer": relayer,
        "block_number": block,
        "gas_used": gas,
        "effective_gas_price": str(price),
        "fee_wei": str(gas * price),
    }


def _seed(b: HistoryBuilder) -> None:
    # Client A, direct, hour 10, fast: two confirmed, the value of both moved.
    b.tx(
        T0 + MINUTE,
        CONFIRMED,
        client_id="client-a",
        value=str(5 * 10**21),
        cost=_cost("relayer-1", 274_177, 67_280_421_310_721),
    )
    b.tx(
        T0 + 2 * MINUTE,
        CONFIRMED,
        client_id="client-a",
        value="1",
        cost=_cost("relayer-2", 21_000, 10**15 + 1),
    )
    # Still on its way (no receipt yet), and one reserved but never sent (its fee is "0"):
    # neither paid a fee; the first moved no value yet.
    b.tx(T0 + 3 * MINUTE, CONFIRMED[:3], client_id="client-a", value="999")
    b.tx(
        T0 + 4 * MINUTE,
        [("processing", 10.0), ("failed", 10.0, "consumer.dlq", "nonce too low")],
        client_id="client-a",
        value="999",
        cost={"fee_wei": "0"},
    )
    # Client A, hour 11, safeLow: reverted on chain. It paid for its gas; its value never moved.
    b.tx(
        T0 + HOUR + MINUTE,
        REVERTED,
        client_id="client-a",
        speed="safeLow",
        value="7",
        cost=_cost("relayer-1", 50_000, 20 * 10**9),
    )
    # Client B, gasless, sent before the relayer pool (no relayer recorded).
    b.tx(
        T0 + 5 * MINUTE,
        CONFIRMED,
        type="gasless",
        speed=None,
        client_id="client-b",
        cost=_cost(None, 100_000, 10**9),
    )
    # Client C: a fee of 39 digits cannot be summed exactly: counted as unreadable, not summed.
    b.tx(
        T0 + 6 * MINUTE,
        CONFIRMED,
        client_id="client-c",
        cost={**_cost("relayer-2", 21_000, 10**9), "fee_wei": "1" * 39},
    )
    # Client S: fees in three hours, the third six times the other two (relayer-3).
    for hour, times in ((0, 1), (1, 1), (2, 6)):
        b.tx(
            T0 + hour * HOUR + 30 * MINUTE,
            CONFIRMED,
            client_id="client-s",
            cost=_cost("relayer-3", 21_000, SPIKE_BASE // 21_000 * times),
        )
    b.save()


@pytest.fixture(scope="module")
def report_dir(spark, module_mysql, tmp_path_factory) -> Path:
    _seed(HistoryBuilder(module_mysql.engine))
    out = tmp_path_factory.mktemp("costs")
    request = ReportRequest(
        window=WINDOW,
        out_dir=str(out),
        now=WINDOW.until,
        thresholds=default_thresholds(5, 60, 30, 30, fee_spike_factor=5, fee_spike_min_hours=3),
    )
    with Progress(spark.sparkContext, total_steps=STEPS, enabled=False) as progress:
        run_report(spark, JdbcReader(spark, module_mysql.db, 2, 1000), None, request, progress)
    return out


@pytest.fixture(scope="module")
def summary(report_dir) -> dict:
    return json.loads((report_dir / "summary.json").read_text())


def _table(spark, report_dir: Path, name: str) -> list[dict]:
    return [row.asDict() for row in spark.read.parquet(str(report_dir / name)).collect()]


def test_fees_hourly_sums_exact_wei_per_hour_type_speed_and_client(spark, report_dir):
    rows = {
        (r["hour"].hour, r["type"], r["speed"], r["client_id"]): r
        for r in _table(spark, report_dir, "fees_hourly")
        if r["client_id"] != "client-s"
    }

    assert set(rows) == {
        (10, "direct", "fast", "client-a"),
        (11, "direct", "safeLow", "client-a"),
        (10, "gasless", "n/a", "client-b"),
    }
    a = rows[(10, "direct", "fast", "client-a")]
    assert FEE_A1 == TWO_64 + 1
    assert a["fee_transactions"] == 2
    assert a["fee_wei"] == Decimal(39_446_744_073_709_572_617) == FEE_A1 + FEE_A2
    # (2^64 + 1 + 21 000 000 000 000 021 000) / 2 = …308.5: the mean rounds half up.
    assert a["fee_mean_wei"] == Decimal(19_723_372_036_854_786_309)
    assert a["fee_max_wei"] == FEE_A2
    assert a["gas_used"] == 274_177 + 21_000
    reverted = rows[(11, "direct", "safeLow", "client-a")]
    assert (reverted["fee_transactions"], reverted["fee_wei"]) == (1, FEE_A3)
    assert (rows[(10, "gasless", "n/a", "client-b")]["fee_wei"]) == FEE_B


def test_client_costs_add_fees_and_the_value_of_confirmed_direct_transactions(spark, report_dir):
    rows = {r["client_id"]: r for r in _table(spark, report_dir, "client_costs")}

    a = rows["client-a"]
    assert (a["fee_transactions"], a["fee_wei"]) == (3, FEE_A1 + FEE_A2 + FEE_A3)
    assert a["gas_used"] == 274_177 + 21_000 + 50_000
    # 5 × 10^21 + 1 wei: the reverted, the unmined and the unsent moved nothing.
    assert (a["value_transactions"], a["value_wei"]) == (2, 5 * 10**21 + 1)
    b = rows["client-b"]
    assert (b["fee_transactions"], b["fee_wei"], b["value_transactions"]) == (1, FEE_B, 0)
    c = rows["client-c"]
    assert (c["fee_transactions"], c["fee_wei"], c["fee_mean_wei"]) == (0, 0, None)
    assert (c["amounts_unreadable"], c["value_transactions"], c["value_wei"]) == (1, 1, 0)


def test_relayer_spend_per_day_is_each_wallets_fees(spark, report_dir):
    rows = {r["relayer"]: r for r in _table(spark, report_dir, "relayer_spend")}

    assert {r["day"] for r in rows.values()} == {date(2026, 3, 2)}
    assert rows["relayer-1"]["fee_wei"] == FEE_A1 + FEE_A3
    assert rows["relayer-1"]["fee_transactions"] == 2
    assert rows["relayer-2"]["fee_wei"] == FEE_A2
    assert rows["relayer-3"]["fee_wei"] == 8 * (SPIKE_BASE // 21_000 * 21_000)
    assert rows[None]["fee_wei"] == FEE_B  # sent before the pool


def test_summary_carries_wei_as_exact_text(summary):
    spike_fees = 8 * (SPIKE_BASE // 21_000 * 21_000)
    costs = summary["costs"]
    assert costs["totals"] == {
        "fee_transactions": 7,
        "fee_wei": str(FEE_A1 + FEE_A2 + FEE_A3 + FEE_B + spike_fees),
        "gas_used": 274_177 + 21_000 + 50_000 + 100_000 + 3 * 21_000,
        "value_transactions": 6,
        "value_wei": str(5 * 10**21 + 1),
        "amounts_unreadable": 1,
    }
    by_client = {c["client_id"]: c for c in costs["by_client"]}
    assert by_client["client-a"]["fee_wei"] == "39447744073709572617"
    assert costs["by_client"][0]["client_id"] == "client-a"  # most fees first
    assert summary["tables"]["client_costs"] == "client_costs/"


def test_a_clients_fee_spike_is_an_anomaly_with_its_client_and_hour(summary):
    spikes = [a for a in summary["anomalies"]["items"] if a["kind"] == "fee_spike"]

    assert [(a["client_id"], a["hour"], a["transaction_id"]) for a in spikes] == [
        ("client-s", "2026-03-02T12:00:00", None)
    ]
    assert "6.0× the client's median hour" in spikes[0]["detail"]
    assert summary["anomalies"]["counts"]["fee_spike"] == 1


def test_report_page_shows_the_cost_tables(report_dir):
    html = (report_dir / "report.html").read_text()

    costs = html[html.index('<h2 id="costs">') : html.index('<h2 id="anomalies">')]
    assert "Fees and value moved per client" in costs
    assert "Relayer spend per day" in costs
    assert 'id="chart-fees"' in costs
    # Client A: 39.447744… ETH, exact wei on hover; 5 000 ETH of value moved.
    assert '<span title="39447744073709572617 wei">39.447744</span>' in costs
    assert '<span title="5000000000000000000001 wei">5,000.000000</span>' in costs
    assert "default relayer" in costs
    assert "left out of every sum" in costs  # client C's unreadable fee
    anomalies = html[html.index('<h2 id="anomalies">') :]
    assert "client client-s, hour 2026-03-02 12:00" in anomalies


def test_a_sum_past_10_to_the_38_is_null_and_so_is_every_total_over_it(spark):
    """DECIMAL(38,0) holds 10^38 − 1 wei: past it a sum is NULL, never wrapped or rounded."""
    from relay_pipeline.report import costs

    schema, huge = CUBE_INPUT, HUGE
    rows = [
        (T0, "direct", "fast", "client-a", "relayer-1", "confirmed", 21_000, huge, None, False),
        (T0, "direct", "fast", "client-a", "relayer-1", "confirmed", 21_000, huge, None, False),
        (
            T0 + HOUR,
            "direct",
            "fast",
            "client-a",
            "relayer-1",
            "confirmed",
            21_000,
            Decimal(5),
            Decimal(7),
            False,
        ),
    ]
    cube = costs.cost_cube(spark.createDataFrame(rows, schema))

    hourly = {r["hour"].hour: r for r in costs.fees_hourly(cube).collect()}
    assert (hourly[10]["fee_transactions"], hourly[10]["fee_wei"]) == (2, None)
    assert hourly[10]["fee_max_wei"] == huge
    assert hourly[11]["fee_wei"] == 5
    (client,) = costs.client_costs(cube).collect()
    assert (client["fee_transactions"], client["fee_wei"], client["value_wei"]) == (3, None, 7)
    (day,) = costs.relayer_spend(cube).collect()
    assert day["fee_wei"] is None


def test_the_cube_with_outcomes_gives_the_same_cost_tables(spark):
    """The report builds one finer cube for the outcome counts and the costs: once its cells
    without a cost are dropped, every cost table equals the one summed from the plain cube —
    a client that paid nothing and moved nothing has no row in either, an overflowed sum is
    NULL in both."""
    from pyspark.sql import functions as F

    from relay_pipeline.report import costs

    # The cube's input with the outcome columns.
    schema = CUBE_INPUT.replace(
        "status string,", "status string, attempts int, failure_reason string,"
    )
    huge = HUGE
    a, b, c = "client-a", "client-b", "client-c"
    r1, r2, late, x = "relayer-1", "relayer-2", "valid_until passed", Decimal
    h0, h1, fast, avg = T0, T0 + HOUR, "fast", "average"
    rows = [
        (h0, "direct", fast, a, r1, "confirmed", 1, None, 21_000, x(5), x(7), False),
        (h0, "direct", fast, a, r1, "failed", 2, "reverted", 30_000, x(9), None, False),
        (h0, "direct", fast, a, r2, "confirmed", 1, None, None, None, x(3), False),
        (h0, "direct", fast, a, None, "expired", 0, late, None, None, None, False),
        (h0, "gasless", fast, b, r1, "confirmed", 3, None, 50_000, huge, None, False),
        (h0, "gasless", fast, b, r1, "confirmed", 1, None, 50_000, huge, None, False),
        (h1, "direct", avg, b, None, "failed", 1, "unreadable", None, None, None, True),
        (h1, "direct", avg, c, None, "expired", 0, late, None, None, None, False),
        (h1, "direct", avg, c, r2, "failed", 4, "nonce", 0, None, None, False),
    ]  # fmt: skip
    lifecycles = spark.createDataFrame(rows, schema)
    plain = costs.cost_cube(lifecycles)
    finer = costs.paid_cells(costs.cost_cube(lifecycles, outcomes=True))

    def rows_of(table):
        return sorted((tuple(row) for row in table.collect()), key=lambda row: tuple(map(str, row)))

    for table in (costs.fees_hourly, costs.client_costs, costs.relayer_spend):
        assert rows_of(table(finer)) == rows_of(table(plain)), table.__name__
    assert {r["client_id"] for r in costs.client_costs(finer).collect()} == {a, b}
    assert costs.totals(costs.client_costs(finer)) == costs.totals(costs.client_costs(plain))
    outcomes = costs.cost_cube(lifecycles, outcomes=True)
    assert outcomes.agg(F.sum("transactions")).first()[0] == len(rows)


def test_a_total_past_10_to_the_38_over_parts_that_each_fit_is_null(spark):
    """Two hours whose fees each fit DECIMAL(38,0) but whose sum does not: the client's total
    (and the window's) is NULL, not 0 (``try_sum`` is NULL both past the range and over no
    parts; the total used to take the first for the second)."""
    from relay_pipeline.report import costs

    schema, huge = CUBE_INPUT, HUGE
    rows = [
        (T0 + n * HOUR, "direct", "fast", "client-z", "relayer-1", "confirmed", 21_000, huge,
         huge, False)
        for n in range(2)
    ]  # fmt: skip
    cube = costs.cost_cube(spark.createDataFrame(rows, schema))

    (client,) = costs.client_costs(cube).collect()
    assert (client["fee_transactions"], client["fee_wei"], client["value_wei"]) == (2, None, None)
    assert client["fee_mean_wei"] is None
    assert costs.totals(costs.client_costs(cube))["fee_wei"] is None
    (day,) = costs.relayer_spend(cube).collect()
    assert day["fee_wei"] is None
