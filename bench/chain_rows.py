"""What a ``bench.chain`` run's database says: the rows' statuses, errors and latencies."""

from __future__ import annotations

import statistics
from typing import Any

from sqlalchemy import create_engine, text

from bench import infra


def _rows(database_url: str, sql: str) -> list[Any]:
    engine = create_engine(infra.sync_url(database_url))
    try:
        with engine.connect() as conn:
            return list(conn.execute(text(sql)))
    finally:
        engine.dispose()


def counts(database_url: str, where: str = "TRUE") -> dict[str, int]:
    rows = _rows(
        database_url,
        f"SELECT status, COUNT(*) FROM transactions WHERE {where} GROUP BY 1",  # noqa: S608 (our own conditions)
    )
    return {str(status): int(n) for status, n in rows}


def errors(database_url: str) -> list[str]:
    rows = _rows(
        database_url, "SELECT DISTINCT error FROM transactions WHERE status = 'failed' LIMIT 5"
    )
    return [str(r[0]) for r in rows]


def latencies(database_url: str) -> list[float]:
    """Per confirmed transaction, from its 202 to its confirmation, ascending."""
    rows = _rows(
        database_url,
        "SELECT TIMESTAMPDIFF(MICROSECOND, created_at, confirmed_at) / 1e6 "
        "FROM transactions WHERE confirmed_at IS NOT NULL",
    )
    return sorted(float(r[0]) for r in rows)


def heard_after(database_url: str) -> list[float]:
    """Per confirmed transaction, how long after the executor saw it confirmed (its
    ``confirmed_at``) Relay recorded it so (the event's time): what a client polling Relay
    waits beyond the chain."""
    rows = _rows(
        database_url,
        "SELECT TIMESTAMPDIFF(MICROSECOND, t.confirmed_at, e.created_at) / 1e6 "
        "FROM transactions t JOIN transaction_events e ON e.transaction_id = t.id "
        "WHERE e.to_status = 'confirmed' AND t.confirmed_at IS NOT NULL",
    )
    return sorted(float(r[0]) for r in rows)


def summary(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(_percentile(values, 50), 3),
        "p95": round(_percentile(values, 95), 3),
        "max": round(max(values), 3) if values else 0.0,
        "mean": round(statistics.fmean(values), 3) if values else 0.0,
    }


def _percentile(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))] if values else 0.0
