"""The SLA report on a tiny hand-made history whose every number is computed by hand."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest

from relay_pipeline.history.repository import JdbcReader
from relay_pipeline.history.window import Window
from relay_pipeline.progress import Progress
from relay_pipeline.report.job import STEPS, ReportRequest, default_thresholds, run_report

from ..conftest import T0, HistoryBuilder

WINDOW = Window(T0, T0 + timedelta(hours=2))
NONCE = "executor 400: nonce too low"
EXHAUSTED = "retries exhausted: executor 503"
REVERTED = "reverted on chain"
EXPIRED = "valid_until passed before submission"


def _seed(builder: HistoryBuilder) -> None:
    minute = timedelta(minutes=1)
    # Client A, direct/fast, hour 10: four confirmed with stage times k × (100, 1000, 1e4, 1e5) ms.
    for k in (1, 2, 3, 4):
        builder.tx(
            T0 + k * minute,
            [
                ("processing", 100 * k),
                ("submitted", 1_000 * k),
                ("mined", 10_000 * k),
                ("confirmed", 100_000 * k),
            ],
            client_id="client-a",
        )
    # Client A, gasless, hour 11: one confirmed; a gasless request has no speed.
    builder.tx(
        T0 + 65 * minute,
        [("processing", 10), ("submitted", 10), ("mined", 10), ("confirmed", 10)],
        type="gasless",
        speed=None,
        client_id="client-a",
    )
    # Client B, direct/fast, hour 10: four failed (three dead-lettered) and one expired.
    for k in (5, 6):
        builder.tx(
            T0 + k * minute,
            [("processing", 50), ("failed", 10, "consumer.dlq", NONCE)],
            client_id="client-b",
            error=NONCE,
        )
    builder.tx(
        T0 + 7 * minute,
        [
            ("processing", 50),
            ("pending", 10, "consumer.retry", "executor 503"),
            ("processing", 50),
            ("pending", 10, "consumer.retry", "executor 503"),
            ("processing", 50),
            ("failed", 10, "consumer.dlq", EXHAUSTED),
        ],
        client_id="client-b",
        error=EXHAUSTED,
    )
    builder.tx(
        T0 + 8 * minute,
        [("processing", 50), ("submitted", 500), ("failed", 5_000, "tracker.poll", REVERTED)],
        client_id="client-b",
        error=REVERTED,
    )
    builder.tx(
        T0 + 9 * minute,
        [("processing", 50), ("expired", 5, "consumer.expire", EXPIRED)],
        client_id="client-b",
        error=EXPIRED,
    )
    # Client C: accepted and enqueued, not yet claimed.
    builder.tx(T0 + 10 * minute, [], client_id="client-c")
    # Outside the window on both sides: never counted.
    builder.tx(T0 - timedelta(hours=1), [("processing", 1)], client_id="client-a")
    builder.tx(T0 + timedelta(hours=3), [("processing", 1)], client_id="client-a")
    builder.save()


@pytest.fixture(scope="module")
def report_dir(spark, module_mysql, pipeline_settings, tmp_path_factory) -> Path:
    _seed(HistoryBuilder(module_mysql.engine))
    out = tmp_path_factory.mktemp("report")
    jdbc = JdbcReader(spark, module_mysql.db, 2, 1000)
    request = ReportRequest(
        window=WINDOW,
        out_dir=str(out),
        now=T0 + timedelta(hours=2),
        thresholds=default_thresholds(5, 60, 30, 30),
    )
    with Progress(spark.sparkContext, total_steps=STEPS, enabled=False) as progress:
        run_report(spark, jdbc, None, request, progress)
    return out


@pytest.fixture(scope="module")
def hourly(spark, report_dir):
    rows = spark.read.parquet(str(report_dir / "hourly")).collect()
    return {(r["hour"].hour, r["type"], r["speed"], r["client_id"]): r for r in rows}


@pytest.fixture(scope="module")
def summary(report_dir) -> dict:
    return json.loads((report_dir / "summary.json").read_text())


def test_hourly_counts_per_hour_type_speed_and_client(hourly):
    assert set(hourly) == {
        (10, "direct", "fast", "client-a"),
        (11, "gasless", "n/a", "client-a"),
        (10, "direct", "fast", "client-b"),
        (10, "direct", "fast", "client-c"),
    }
    a = hourly[(10, "direct", "fast", "client-a")]
    assert (a["accepted"], a["submitted"], a["confirmed"], a["failed"], a["expired"]) == (
        4,
        4,
        4,
        0,
        0,
    )
    assert a["success_rate"] == 1.0
    b = hourly[(10, "direct", "fast", "client-b")]
    assert (b["accepted"], b["submitted"], b["confirmed"], b["failed"], b["expired"]) == (
        5,
        1,
        0,
        4,
        1,
    )
    assert b["dead_lettered"] == 3
    assert b["success_rate"] == 0.0
    c = hourly[(10, "direct", "fast", "client-c")]
    assert (c["accepted"], c["submitted"], c["success_rate"]) == (1, 0, None)


def test_stage_percentiles_are_nearest_rank_of_the_samples(hourly):
    a = hourly[(10, "direct", "fast", "client-a")]
    # Samples are k × base for k = 1..4: p50 is the 2nd smallest, p95 and p99 the largest.
    expected = {
        "accept_to_claim": (200, 400, 400),
        "claim_to_submitted": (2_000, 4_000, 4_000),
        "submitted_to_mined": (20_000, 40_000, 40_000),
        "mined_to_confirmed": (200_000, 400_000, 400_000),
        "end_to_end": (222_200, 444_400, 444_400),
    }
    for stage, (p50, p95, p99) in expected.items():
        got = (a[f"{stage}_p50_ms"], a[f"{stage}_p95_ms"], a[f"{stage}_p99_ms"])
        assert got == (p50, p95, p99), stage
    # A stage nobody reached has no percentile, not zero.
    b = hourly[(10, "direct", "fast", "client-b")]
    assert b["mined_to_confirmed_p50_ms"] is None
    assert b["accept_to_claim_p50_ms"] == 50  # first claim, not the retried ones


def test_failure_reasons_rank_by_count_then_reason(summary):
    assert summary["top_failure_reasons"] == [
        {"rank": 1, "reason": NONCE, "transactions": 2},
        {"rank": 2, "reason": EXHAUSTED, "transactions": 1},
        {"rank": 3, "reason": REVERTED, "transactions": 1},
        {"rank": 4, "reason": EXPIRED, "transactions": 1},
    ]


def test_attempts_histogram_counts_executor_attempts(spark, report_dir, summary):
    assert summary["attempts_histogram"] == {"0": 1, "1": 9, "3": 1}
    rows = spark.read.parquet(str(report_dir / "attempts")).collect()
    b = {r["attempts"]: r["transactions"] for r in rows if r["client_id"] == "client-b"}
    assert b == {1: 4, 3: 1}


def test_summary_totals_and_overall_latency(summary):
    assert summary["totals"] == {
        "accepted": 11,
        "submitted": 6,
        "confirmed": 5,
        "failed": 4,
        "expired": 1,
        "canceled": 0,
        "dead_lettered": 3,
        "success_rate": round(5 / 10, 6),
    }
    claim = summary["stage_latency_ms"]["accept_to_claim"]
    # 10 claimed: 10 (gasless), 50 × 5 (client B), 100..400 (client A) → ranks 5, 10, 10.
    assert claim == {"samples": 10, "p50_ms": 50.0, "p95_ms": 400.0, "p99_ms": 400.0}
    assert [p["accepted"] for p in summary["throughput_per_hour"]] == [10, 1]


def test_report_html_is_self_contained_with_five_charts(report_dir):
    html = (report_dir / "report.html").read_text()
    for chart in ("throughput", "latency", "failures", "attempts", "fees"):
        assert f'id="chart-{chart}"' in html
    assert html.count("<svg") == 5
    assert "<script" not in html
    # Nothing is fetched: no external src/href/url() (XML namespace names are not fetches).
    assert (
        re.search(r"""(src|href)\s*=\s*["']?(https?:)?//|url\(\s*["']?(https?:)?//""", html) is None
    )


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(
    CHROMIUM is None,
    reason="Debian's chromium is not installed (make pipeline-deps installs it)",
)
def test_report_renders_its_charts_in_headless_chromium(report_dir, tmp_path):
    page = (report_dir / "report.html").as_uri()
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    dom = subprocess.run(
        [CHROMIUM, *flags, "--dump-dom", page], capture_output=True, text=True, timeout=60
    ).stdout
    # The DOM Chromium built from the page: each figure holds a parsed SVG with drawn paths.
    for chart in ("throughput", "latency", "failures", "attempts"):
        start = dom.index(f'id="chart-{chart}"')
        figure = dom[start : dom.index("</figure>", start)]
        assert "<svg" in figure, chart
        assert "<path" in figure, chart

    shot = tmp_path / "report.png"
    subprocess.run(
        [CHROMIUM, *flags, "--window-size=1200,2400", f"--screenshot={shot}", page],
        capture_output=True,
        timeout=60,
        check=True,
    )
    from matplotlib.image import imread

    pixels = imread(str(shot))
    assert pixels.shape[0] == 2400
    assert pixels.shape[1] == 1200
    # Charts draw in colour: the series colours are present, not just text on white.
    colours = {
        tuple((pixels[y, x, :3] * 255).round().astype(int))
        for y in range(0, 2400, 3)
        for x in range(0, 1200, 3)
    }
    assert (0x4C, 0x78, 0xA8) in colours  # accepted / p50 blue
    assert (0xE4, 0x57, 0x56) in colours  # failures red
