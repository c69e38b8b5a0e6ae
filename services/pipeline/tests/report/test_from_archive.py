"""A report over history that is mostly archived gives the figures of a report over the same
history read from the database alone — first run, re-runs on the derived lifecycles, a new day
in the tail, and after archive runs that touch dates already derived.

Two databases hold the same history: ``full`` is never archived (the reference), ``tail`` is
archived into ``archive`` and read with it. Every output table is compared row for row, and
summary.json figure for figure.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from relay_pipeline.archive.job import ArchiveRequest, run_archive
from relay_pipeline.derived import service as derived
from relay_pipeline.history.repository import ArchiveReader, JdbcReader
from relay_pipeline.history.window import Window
from relay_pipeline.progress import Progress
from relay_pipeline.report.job import (
    STEPS,
    TABLES,
    ReportRequest,
    default_thresholds,
    run_report,
)

from ..conftest import HistoryBuilder, ScratchDatabase, scratch_database

# Each test runs a dozen reports and archive runs on two cores shared with MariaDB.
pytestmark = pytest.mark.timeout(1200)

BASE = datetime(2026, 3, 2)  # midnight; "day k" is BASE + k days
# Not aligned to dates: the first date is partial, and events run past the end plus a day.
W1 = Window(BASE + timedelta(days=1, hours=6), BASE + timedelta(days=4, hours=18))
W2 = Window(W1.since, BASE + timedelta(days=6, hours=18))
FIRST_CUTOFF = BASE + timedelta(days=4)
SECOND_CUTOFF = BASE + timedelta(days=7)
VOLATILE = ("generated_at", "elapsed_s", "inputs")
EXHAUSTED = "retries exhausted: executor 503"
EXPIRED = "valid_until passed before submission"
REVERTED = "reverted on chain"
HOUR_MS = 3_600_000.0


class Crash(Exception):
    """The archive process dying at a checkpoint."""


def _crash_at(point: str) -> Callable[[str], None]:
    def checkpoint(name: str) -> None:
        if name == point:
            raise Crash(point)

    return checkpoint


def _done(scale: int) -> list[tuple[str, float]]:
    return [
        ("processing", 100.0 * scale),
        ("submitted", 900.0 * scale),
        ("mined", 12_000.0 * scale),
        ("confirmed", 140_000.0 * scale),
    ]


def _ordinary_days(builder: HistoryBuilder, days: range) -> None:
    speeds = ("fast", "average", "safeLow")
    for day in days:
        for hour in (2, 8, 14, 20):
            at = BASE + timedelta(days=day, hours=hour)
            for k, client in enumerate(("client-a", "client-b", "client-c")):
                gas = 21_000 + 1_000 * k
                builder.tx(
                    at + timedelta(minutes=k),
                    _done(1 + k + day),
                    client_id=client,
                    speed=speeds[k],
                    value=str(10**15 * (1 + hour)),
                    cost={
                        "relayer": f"relayer-{1 + k % 2}",
                        "block_number": 100 + day * 24 + hour,
                        "gas_used": gas,
                        "effective_gas_price": 10**9 * (1 + day),
                        "fee_wei": str(gas * 10**9 * (1 + day)),
                    },
                )
            builder.tx(
                at + timedelta(minutes=5),
                [
                    ("processing", 50),
                    ("pending", 10, "consumer.retry", "executor 503"),
                    ("processing", 60 + day),
                    ("failed", 10, "consumer.dlq", EXHAUSTED),
                ],
                client_id="client-b",
                error=EXHAUSTED,
            )
            builder.tx(
                at + timedelta(minutes=6),
                [("processing", 40 + hour), ("expired", 5, "consumer.expire", EXPIRED)],
                type="gasless",
                speed=None,
                error=EXPIRED,
            )
            builder.tx(
                at + timedelta(minutes=7),
                [("processing", 40), ("submitted", 300), ("canceled", 900)],
                client_id="client-c",
            )
            builder.tx(
                at + timedelta(minutes=8),
                [
                    ("processing", 30),
                    ("submitted", 300),
                    ("failed", 4_000, "tracker.poll", REVERTED),
                ],
                client_id="client-a",
                error=REVERTED,
            )
        # Finished, but its trail was lost: a trail_mismatch anomaly from the archive.
        builder.tx(
            BASE + timedelta(days=day, hours=14, minutes=30),
            _done(2),
            client_id="client-b",
            with_events=False,
        )


def _awkward(builder: HistoryBuilder) -> None:
    # Stuck since day 1: never finished, so never archived (an anomaly of every report).
    builder.tx(BASE + timedelta(days=1, hours=9), [("processing", 50)], client_id="client-c")
    # Accepted inside W1 (day 1, 07:00) with an event before W1 starts (a clock behind).
    builder.tx(
        BASE + timedelta(days=1, hours=7),
        [
            ("processing", -2.5 * HOUR_MS),
            ("submitted", 2.5 * HOUR_MS + 300),
            ("mined", 9_000),
            ("confirmed", 100_000),
        ],
    )
    builder.tx(
        BASE + timedelta(days=1, hours=7, minutes=5),
        [("processing", -2.5 * HOUR_MS), ("submitted", 2.5 * HOUR_MS + 300), ("failed", 2_000)],
        error=REVERTED,
    )
    # Accepted on day 2, confirmed on day 4: left in the database by the first archive run and
    # archived into the already-derived date of day 2 by the second. Its group (08:00, direct,
    # fast, client-a) also holds archived transactions.
    builder.tx(
        BASE + timedelta(days=2, hours=8, minutes=30),
        [("processing", 100), ("submitted", 500), ("mined", 10_000), ("confirmed", 49 * HOUR_MS)],
        client_id="client-a",
    )
    # Accepted on day 3, confirmed on day 6: after W1's end plus a day, so a report over W1
    # does not see that event (the row still says confirmed: a trail_mismatch there). Its
    # group (14:00, direct, fast, client-b) also holds archived transactions.
    builder.tx(
        BASE + timedelta(days=3, hours=14, minutes=40),
        [("processing", 100), ("submitted", 500), ("mined", 10_000), ("confirmed", 61 * HOUR_MS)],
        client_id="client-b",
    )


@dataclass
class Twin:
    """The same history in two databases; ``tail`` is the one archived into ``archive``."""

    spark: Any
    full: ScratchDatabase
    tail: ScratchDatabase
    root: Path

    @property
    def archive(self) -> Path:
        return self.root / "archive"

    def add(self, fill: Callable[[HistoryBuilder], None]) -> None:
        builder = HistoryBuilder(self.full.engine)
        fill(builder)
        transactions, events = list(builder.transactions), list(builder.events)
        builder.save()
        HistoryBuilder(self.tail.engine, transactions=transactions, events=events).save()

    def archive_until(self, cutoff: datetime, checkpoint: Callable[[str], None] | None = None):
        request = ArchiveRequest(
            out=str(self.archive), cutoff=cutoff, batch_size=1000, partitions=2, fetch_size=1000
        )
        if checkpoint is None:
            return run_archive(self.spark, self.tail.db, request)
        return run_archive(self.spark, self.tail.db, request, checkpoint=checkpoint)

    def report(
        self, name: str, window: Window, *, reference: bool = False, archive_only: bool = False
    ) -> dict[str, Any]:
        out = self.root / name
        db = self.full.db if reference else self.tail.db
        jdbc = None if archive_only else JdbcReader(self.spark, db, 2, 1000)
        archive = None if reference else ArchiveReader(self.spark, str(self.archive))
        request = ReportRequest(
            window=window,
            out_dir=str(out),
            now=window.until,
            thresholds=default_thresholds(5, 60, 30, 30),
        )
        with Progress(None, total_steps=STEPS, enabled=False) as progress:
            run_report(self.spark, jdbc, archive, request, progress)
        summary = json.loads((out / "summary.json").read_text())
        return {
            "summary": {k: v for k, v in summary.items() if k not in VOLATILE},
            **{
                table: Counter(
                    tuple(row) for row in self.spark.read.parquet(str(out / table)).collect()
                )
                for table in TABLES
            },
        }

    def builds(self, derived: str = "lifecycles") -> dict[str, str]:
        """The build each date's derived data (lifecycles, hourly) comes from."""
        return {
            path.parent.name.split("=", 1)[1]: json.loads(path.read_text())["build"]
            for path in (self.archive / "_derived" / derived).glob("date=*/_manifest.json")
        }

    def tail_rows(self) -> int:
        return int(self.tail.rows("SELECT COUNT(*) FROM transactions")[0][0])


@pytest.fixture
def twin(spark, tmp_path):
    with scratch_database() as full, scratch_database() as tail:
        yield Twin(spark, full, tail, tmp_path)


def _assert_same_figures(candidate: dict[str, Any], reference: dict[str, Any]) -> None:
    for table in TABLES:
        assert candidate[table] == reference[table], table
    for key, value in reference["summary"].items():
        assert candidate["summary"][key] == value, key


def _spy_rows_except(monkeypatch: pytest.MonkeyPatch) -> list[set[str]]:
    """The dates each ``ArchivedLifecycles.rows_except`` call leaves out, as they come."""
    calls: list[set[str]] = []
    real = derived.ArchivedLifecycles.rows_except

    def spy(self: derived.ArchivedLifecycles, dates: set[str]) -> Any:
        calls.append(set(dates))
        return real(self, dates)

    monkeypatch.setattr(derived.ArchivedLifecycles, "rows_except", spy)
    return calls


def _history(builder: HistoryBuilder) -> None:
    _ordinary_days(builder, range(6))
    _awkward(builder)


def test_report_over_archive_and_database_tail_equals_the_database_report(twin):
    twin.add(_history)
    reference = twin.report("reference", W1, reference=True)
    assert reference["summary"]["totals"]["accepted"] > 80
    assert sum(reference["anomalies"].values()) >= 4

    # Archived, not yet deleted: every archived row is in both places.
    with pytest.raises(Crash):
        twin.archive_until(FIRST_CUTOFF, _crash_at("published"))
    _assert_same_figures(twin.report("overlap", W1), reference)
    derived_first = twin.builds()
    assert sorted(derived_first) == ["2026-03-03", "2026-03-04", "2026-03-05"]
    # The hourly groups of the dates wholly inside W1 (day 1 starts before it).
    hourly_first = twin.builds("hourly")
    assert sorted(hourly_first) == ["2026-03-04", "2026-03-05"]

    # The run completed: the database keeps only the tail; the derived dates are reused.
    result = twin.archive_until(FIRST_CUTOFF)
    assert result.deleted == 4 * 29 + 2
    assert twin.tail_rows() == 2 * 29 + 3  # days 4 and 5, the stuck one, two late finishers
    _assert_same_figures(twin.report("archived", W1), reference)
    assert twin.builds() == derived_first

    _assert_same_figures(twin.report("again", W1), reference)
    assert twin.builds() == derived_first
    assert twin.builds("hourly") == hourly_first


def test_a_new_day_and_archive_runs_into_derived_dates_keep_the_figures_equal(twin, monkeypatch):
    twin.add(_history)
    twin.archive_until(FIRST_CUTOFF)
    _assert_same_figures(twin.report("first", W1), twin.report("reference-w1", W1, reference=True))
    derived_first = twin.builds()
    hourly_first = twin.builds("hourly")

    # One more day, still in the database: reported from the tail, nothing derived again.
    twin.add(lambda builder: _ordinary_days(builder, range(6, 7)))
    reference_w2 = twin.report("reference-w2", W2, reference=True)
    _assert_same_figures(twin.report("new-day", W2), reference_w2)
    assert twin.builds() == derived_first

    # Archived further: days 2 and 3 receive late finishers, so their derived lifecycles are
    # stale and derived again; day 1 is untouched and reused; days 4 to 6 are new.
    twin.archive_until(SECOND_CUTOFF)
    assert twin.tail_rows() == 1  # the stuck one
    left_out = _spy_rows_except(monkeypatch)
    _assert_same_figures(twin.report("after-second-archive", W2), reference_w2)
    # Only the stuck one (day 1) is read from the database and no event lies outside W2's
    # reach: the whole dates' files are not read again for the hourly table.
    assert left_out == [{"2026-03-04", "2026-03-05", "2026-03-06", "2026-03-07"}]
    # The archive alone over whole dates (no database, nothing computed again): every hourly
    # group comes from the stored tables, and no date's lifecycles are read for them.
    left_out.clear()
    whole_days = Window(BASE + timedelta(days=2), BASE + timedelta(days=6))
    alone = twin.report("archive-alone", whole_days, archive_only=True)
    assert alone["summary"]["totals"]["accepted"] == 4 * 29 + 2  # days 2-5, two late finishers
    assert alone["hourly"] == twin.report("reference-w3", whole_days, reference=True)["hourly"]
    assert left_out == [{"2026-03-04", "2026-03-05", "2026-03-06", "2026-03-07"}]
    builds = twin.builds()
    assert builds["2026-03-03"] == derived_first["2026-03-03"]
    assert builds["2026-03-04"] != derived_first["2026-03-04"]
    assert builds["2026-03-05"] != derived_first["2026-03-05"]
    assert {"2026-03-06", "2026-03-07", "2026-03-08"} <= set(builds)
    # A date derived again gets its per-group tables again.
    assert twin.builds("hourly")["2026-03-04"] != hourly_first["2026-03-04"]

    # W1 again, now wholly archived: day 3 has an event after W1's end plus a day.
    reference_w1 = twin.report("reference-w1-again", W1, reference=True)
    assert any(
        "trail_mismatch" in row and "row is confirmed, last event is mined" in row
        for row in reference_w1["anomalies"]
    )
    left_out.clear()
    _assert_same_figures(twin.report("w1-archived", W1), reference_w1)
    # Day 3 is computed again for W1 (its late event), day 1 holds the stuck one: only day 2
    # is whole and untouched.
    assert left_out == [{"2026-03-04"}]


def test_derived_dates_are_rebuilt_when_the_code_changes_or_a_file_is_missing(twin, monkeypatch):
    twin.add(lambda builder: _ordinary_days(builder, range(4)))
    twin.archive_until(FIRST_CUTOFF)
    reference = twin.report("reference", W1, reference=True)
    _assert_same_figures(twin.report("first", W1), reference)
    first = twin.builds()

    monkeypatch.setattr(derived, "FORMAT", derived.FORMAT + 1)
    _assert_same_figures(twin.report("new-code", W1), reference)
    rebuilt = twin.builds()
    assert all(rebuilt[date] != first[date] for date in first)

    day = twin.archive / "_derived" / "lifecycles" / "date=2026-03-04"
    for data in day.glob("*.parquet"):
        data.unlink()
    _assert_same_figures(twin.report("missing-file", W1), reference)
    again = twin.builds()
    assert again["2026-03-04"] != rebuilt["2026-03-04"]
    assert again["2026-03-03"] == rebuilt["2026-03-03"]
