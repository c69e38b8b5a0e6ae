"""The history checker: what a soak did, from the database, the executor's ledger and the
client's log of answers. Every transaction the client was answered 202 for must have been
executed exactly once and ended `confirmed`; every status read of it must be no older than
the one before."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

import httpx
from sqlalchemy import create_engine, text

from bench.infra import sync_url
from bench.soak.client import ClientLog
from bench.soak.nemesis import Window

RANK = {"pending": 0, "processing": 1, "submitted": 2, "mined": 3, "confirmed": 4}
FINAL = {"confirmed", "failed", "expired", "canceled"}
RECOVERY_S = 60  # after a fault's end, transactions are still counted as in its window


@dataclass
class Report:
    accepted: int = 0
    executed_once: int = 0
    executed_twice: int = 0
    lost: int = 0
    failed_transient: int = 0
    stuck: int = 0
    reads_backwards: int = 0
    abandoned_by_client: int = 0
    nemesis_errors: int = 0
    status_reads: int = 0
    outside_faults: int = 0
    accept_to_submitted_p50_ms: float | None = None
    accept_to_submitted_p99_ms: float | None = None
    rss_mb: dict[str, dict[str, float]] = field(default_factory=dict)
    rss_growth: dict[str, float] = field(default_factory=dict)
    faults: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        counts = (
            self.executed_twice,
            self.lost,
            self.failed_transient,
            self.stuck,
            self.reads_backwards,
            self.abandoned_by_client,
            self.nemesis_errors,
        )
        return not any(counts) and all(g < 0.10 for g in self.rss_growth.values())

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "clean": self.clean}


def ledger(executor_url: str) -> Counter[str]:
    """How many times the executor accepted each calldata (every page of its ledger)."""
    runs: Counter[str] = Counter()
    with httpx.Client(base_url=executor_url, timeout=120) as http:
        offset = 0
        while True:
            page = http.get("/__admin/ledger", params={"limit": 100_000, "offset": offset}).json()
            entries = page["entries"]
            runs.update(str(entry["data"]).lower() for entry in entries)
            offset += len(entries)
            if not entries or offset >= int(page["count"]):
                return runs


def check(
    database_url: str,
    executor_url: str,
    log: ClientLog,
    windows: list[Window],
    rss: dict[str, dict[str, float]],
) -> Report:
    report = Report(
        accepted=len(log.accepted),
        abandoned_by_client=len(log.abandoned),
        nemesis_errors=len(log.nemesis_errors),
    )
    report.notes.extend(log.nemesis_errors)
    engine = create_engine(sync_url(database_url))
    with engine.connect() as conn:
        rows = {
            r.id: r
            for r in conn.execute(
                text("SELECT id, status, error, created_at, submitted_at FROM transactions")
            )
        }
    engine.dispose()
    runs = ledger(executor_url)
    for accepted in log.accepted:
        row = rows.get(accepted.transaction_id)
        executions = runs.get(accepted.data.lower(), 0)
        if row is None or executions == 0:
            report.lost += 1
        elif executions > 1:
            report.executed_twice += 1
        else:
            report.executed_once += 1
        if row is not None and row.status in FINAL - {"confirmed"}:
            report.failed_transient += 1
            report.notes.append(f"{row.id} {row.status}: {row.error}"[:200])
        elif row is not None and row.status != "confirmed":
            report.stuck += 1
            report.notes.append(f"{row.id} stuck in {row.status}")
    report.notes = report.notes[:20]
    _reads(report, log)
    _latency(
        report, [rows[a.transaction_id] for a in log.accepted if a.transaction_id in rows], windows
    )
    report.rss_mb = rss
    report.rss_growth = {
        name: (sample["end"] - sample["start"]) / sample["start"]
        for name, sample in rss.items()
        if sample.get("start") and sample.get("end")
    }
    report.faults = [
        {"fault": w.fault, "start": str(w.start), "seconds": (w.end - w.start).total_seconds()}
        for w in windows
    ]
    return report


def _reads(report: Report, log: ClientLog) -> None:
    """A read older than an earlier one: a lower rank, a 404 after anything, or a status
    after a final one that differs from it."""
    by_tx: dict[str, list[str]] = {}
    for tx_id, status, _ in sorted(log.reads, key=lambda read: read[2]):
        by_tx.setdefault(tx_id, []).append(status)
    report.status_reads = len(log.reads)
    for statuses in by_tx.values():
        seen = -1
        final: str | None = None
        for status in statuses:
            if status == "404" or (final is not None and status != final):
                report.reads_backwards += 1
                break
            if status in FINAL:
                final = status
            rank = RANK.get(status, 5)
            if rank < seen:
                report.reads_backwards += 1
                break
            seen = rank


def _latency(report: Report, rows: list[Any], windows: list[Window]) -> None:
    grace = timedelta(seconds=RECOVERY_S)

    def in_a_fault(row: Any) -> bool:
        return any(w.start <= row.created_at <= w.end + grace for w in windows)

    waits = sorted(
        (row.submitted_at - row.created_at).total_seconds() * 1000
        for row in rows
        if row.submitted_at is not None and not in_a_fault(row)
    )
    report.outside_faults = len(waits)
    if len(waits) >= 2:
        report.accept_to_submitted_p50_ms = round(statistics.median(waits), 1)
        report.accept_to_submitted_p99_ms = round(waits[int(len(waits) * 0.99) - 1], 1)
