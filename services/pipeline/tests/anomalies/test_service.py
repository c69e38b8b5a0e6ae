"""The anomaly scan finds each kind of stuck or inconsistent transaction by id, and nothing else."""

from __future__ import annotations

from datetime import timedelta

import pytest

from relay_pipeline.anomalies.job import find_anomalies
from relay_pipeline.history.lifecycle import lifecycles
from relay_pipeline.history.repository import JdbcReader
from relay_pipeline.history.window import Window
from relay_pipeline.report.job import default_thresholds

from ..conftest import T0, HistoryBuilder

NOW = T0 + timedelta(hours=2)
WINDOW = Window(T0, NOW)
DONE = [("processing", 100), ("submitted", 300), ("mined", 9_000), ("confirmed", 90_000)]


@pytest.fixture(scope="module")
def found(spark, module_mysql):
    b = HistoryBuilder(module_mysql.engine)
    minute = timedelta(minutes=1)
    expected = {
        ("never_enqueued", b.tx(T0 + 10 * minute, [], enqueued=False)),
        ("stuck_processing", b.tx(T0 + 20 * minute, [("processing", 100)])),
        ("stale_inflight", b.tx(T0 + 30 * minute, [("processing", 100), ("submitted", 300)])),
        ("stale_inflight", b.tx(T0 + 40 * minute, DONE[:3])),
        # The row says confirmed; its trail stops at mined.
        ("trail_mismatch", b.tx(T0 + 50 * minute, DONE[:3], status="confirmed")),
        # Past pending, yet no event at all (recent, so not stale).
        ("trail_mismatch", b.tx(NOW - minute, DONE[:2], with_events=False)),
        # A stuck claim from days before the window is still found.
        ("stuck_processing", b.tx(T0 - timedelta(days=3), [("processing", 100)])),
    }
    healthy = {
        b.tx(NOW - 2 * minute, [], enqueued=False),  # within the enqueue grace
        b.tx(NOW - timedelta(seconds=30), [("processing", 100)]),  # claim younger than timeout
        b.tx(NOW - 10 * minute, DONE[:2]),  # submitted 10 minutes ago: not stale yet
        b.tx(T0 + 5 * minute, DONE),
        b.tx(
            T0 + 6 * minute,
            [("processing", 50), ("pending", 10, "consumer.retry", "503"), *DONE],
        ),
    }
    b.save()
    jdbc = JdbcReader(spark, module_mysql.db, 2, 1000)
    anomalies = find_anomalies(
        lifecycles(jdbc.transactions(WINDOW), jdbc.events(WINDOW)),
        jdbc,
        WINDOW,
        NOW,
        default_thresholds(5, 60, 30, 30),
    ).collect()
    return anomalies, expected, healthy


def test_every_anomaly_is_found_by_kind_and_id(found):
    anomalies, expected, healthy = found
    assert {(a["kind"], a["transaction_id"]) for a in anomalies} == expected
    assert not healthy & {a["transaction_id"] for a in anomalies}


def test_anomalies_say_why(found):
    anomalies, _, _ = found
    details = {a["kind"]: a["detail"] for a in anomalies}
    assert "visibility timeout 90 s" in details["stuck_processing"]
    trail = sorted(a["detail"] for a in anomalies if a["kind"] == "trail_mismatch")
    assert trail == ["row is confirmed, last event is mined", "submitted with no events"]
    stuck = [a for a in anomalies if a["kind"] == "never_enqueued"]
    assert stuck[0]["age_minutes"] == pytest.approx(110.0)
