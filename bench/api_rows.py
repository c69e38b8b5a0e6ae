"""The API scenarios' rows of the results table: the accept path at each offered rate (and
the consecutive full-rate runs), the fee budget's cost, the status lookups per tier, and the
pickup latencies (light load, fast lane behind a backlog)."""

from __future__ import annotations

from typing import Any

from bench.table import Judge, Row, lookup
from bench.targets import (
    API_ANSWERED_SHARE,
    API_CPU_MS,
    API_DB_ROUND_TRIPS,
    API_FULL_RATE,
    API_FULL_RUNS_NEEDED,
    API_P99_MS,
    API_RATE,
    BATCH_CPU_SHARE,
    GUARD_US,
    LEASE_SLACK,
    PICKUP_P95_MS,
    STATUS_HIT_P99_MS,
    STATUS_MYSQL_P99_MS,
)

# Latency is measured from the moment the generator starts a request; the same from its due
# time, and how late the generator's timer started it, are shown beside (bench/loadgen.py).
_FROM_DUE_LABEL = " (from the due time p50 / p99; the generator's own lateness p99)"


def _from_due(result: dict[str, Any]) -> str:
    due = result.get("latency_from_due_ms")
    late = result.get("generator_late_ms")
    if not due or not late:
        return ""
    return f" ({due['p50']} / {due['p99']}; {late['p99']})"


def accept_rows(
    accept_levels: list[dict[str, Any]],
    http: dict[str, Any],
    db_latency: dict[str, Any],
    judge: Judge,
) -> list[Row]:
    """Each accept level's rows (``http`` and ``db_latency``: the same-run ceilings)."""
    out: list[Row] = []
    full_runs: list[bool] = []
    for index, level in enumerate(accept_levels):
        rate = level["offered_rate"]
        name = f"API accept, offered {rate} req/s"
        repeats = [other for other in accept_levels if other["offered_rate"] == rate]
        if len(repeats) > 1:
            run_no = sum(1 for other in accept_levels[:index] if other["offered_rate"] == rate)
            name += f" (run {run_no + 1} of {len(repeats)})"
        lat = level["latency_ms"]
        answered = level["ok"] / max(rate * level["nominal_s"], 1)
        meets = (
            answered >= API_ANSWERED_SHARE
            and level["error_count"] == 0
            and (lat["p99"] or 1e9) <= API_P99_MS
        )
        is_target = rate == API_RATE
        if rate == API_FULL_RATE:
            full_runs.append(meets)
        out.append(
            Row(
                name,
                "achieved 202/s",
                level["achieved_rate"],
                "req/s",
                http.get("rate"),
                "bare endpoint",
                f">= {API_RATE}/s answered, p99 <= {API_P99_MS:g} ms" if is_target else "",
                judge(meets) if is_target else None,
            )
        )
        out.append(
            Row(
                name,
                f"latency p50 / p95 / p99{_FROM_DUE_LABEL}",
                f"{lat['p50']} / {lat['p95']} / {lat['p99']}{_from_due(level)}",
                "ms",
                None,
            )
        )
        if is_target and db_latency:
            # The accept path commits before it answers: its p99 cannot beat the database's.
            out.append(
                Row(
                    name,
                    "p99",
                    lat["p99"],
                    "ms",
                    lookup(db_latency, "latency_ms", "p99"),
                    f"MariaDB INSERT+COMMIT p99 at {db_latency['rate']}/s",
                )
            )
        probe = level.get("commit_probe")
        if probe:
            timeline = level.get("timeline", [])
            slow_api = [t["second"] for t in timeline if (t["p99"] or 0) > 50]
            slow_db = sorted(int(second) for second in probe["slow_seconds"])
            late = [t["second"] for t in timeline if t.get("late_send_max", 0) > 50]
            out.append(
                Row(
                    name,
                    "beside it, one connection's INSERT+COMMIT p50 / p99 / max; seconds with a "
                    "request over 50 ms: API / database / sent 50 ms late by the generator",
                    f"{probe['latency_ms']['p50']} / {probe['latency_ms']['p99']} / "
                    f"{probe['latency_ms']['max']} ms; {_seconds(slow_api)} / "
                    f"{_seconds(slow_db)} / {_seconds(late)}",
                )
            )
        loop = level.get("api_loop")
        if loop:
            out.append(
                Row(
                    name,
                    f"API event loop: max lag; seconds with a lag >= {loop['stall_ms']:g} ms "
                    "(worst lag), the API on CPU / off CPU; longest collector pause",
                    f"{loop['max_lag_ms']} ms; {_lags(loop['busy_seconds'])} / "
                    f"{_lags(loop['off_cpu_seconds'])}; {loop.get('max_gc_pause_ms', '-')} ms",
                )
            )
        out.append(Row(name, "errors", level["error_count"], ""))
        trips = level["db_round_trips_per_accepted"]
        out.append(
            Row(
                name,
                "DB round trips per accepted request, request path",
                trips["request_path"],
                "",
                None,
                "",
                f"<= {API_DB_ROUND_TRIPS:g} (+ budget leases)" if is_target else "",
                judge(trips["request_path"] <= API_DB_ROUND_TRIPS + LEASE_SLACK)
                if is_target
                else None,
            )
        )
        out.append(
            Row(
                name,
                "DB round trips per accepted request, + publisher (after the response)",
                f"{trips['request_path']} + {trips['background']} = {trips['total']}",
            )
        )
        cpu_target = rate >= API_RATE
        out.append(
            Row(
                name,
                "API CPU per request",
                level["api_cpu_ms_per_request"],
                "ms",
                None,
                "",
                f"<= {API_CPU_MS:g} ms (issue 18)" if cpu_target else "",
                judge(level["api_cpu_ms_per_request"] <= API_CPU_MS) if cpu_target else None,
            )
        )
    if len(full_runs) > 1:
        out.append(
            Row(
                f"API accept, offered {API_FULL_RATE} req/s",
                f"consecutive runs answered in full with p99 <= {API_P99_MS:g} ms",
                f"{sum(full_runs)} of {len(full_runs)}",
                "",
                None,
                "",
                f">= {API_FULL_RUNS_NEEDED} of 5 (issue 18)",
                judge(sum(full_runs) >= API_FULL_RUNS_NEEDED),
            )
        )
    return out


def fee_rows(fees: dict[str, Any] | None, judge: Judge) -> list[Row]:
    out: list[Row] = []
    if fees:
        name = (
            f"fee budget, offered {fees['rate']} req/s ({fees['duration_s']:g} s each, alternately)"
        )
        runs = fees["api_cpu_ms_per_request"]
        median = fees["median_ms"]
        out.append(
            Row(
                name,
                "API CPU per request, fee budget off / on (median; each run)",
                f"{median['off']} / {median['on']} ({', '.join(map(str, runs['off']))} / "
                f"{', '.join(map(str, runs['on']))})",
                "ms",
            )
        )
        guard = fees["guard_us"]
        out.append(
            Row(
                name,
                "the guard's own code per request, fee budget off / on",
                f"{guard['off']} / {guard['on']}",
                "µs",
                None,
                "",
                f"on < {GUARD_US:g} µs (issue 27)",
                judge(guard["on"] < GUARD_US),
            )
        )
    return out


def batch_rows(batch: dict[str, Any] | None, judge: Judge) -> list[Row]:
    out: list[Row] = []
    if not batch:
        return out
    name = f"batches, offered {batch['tx_rate']} tx/s ({batch['duration_s']:g} s each, in turn)"
    for shape, label in (
        ("single", "single requests (POST /relay/direct)"),
        ("batch_1", "batches of 1"),
        ("batch_10", "batches of 10"),
        ("batch_100", "batches of 100"),
    ):
        median = batch["median"][shape]
        runs = ", ".join(str(level["net_cpu_ms_per_tx"]) for level in batch["rounds"][shape])
        out.append(
            Row(
                name,
                f"{label}: accepted tx/s; API CPU per transaction, all / less the idle process's "
                "(median; each run, less idle)",
                f"{median['accepted_per_s']:g}; {median['api_cpu_ms_per_tx']} / "
                f"{median['net_cpu_ms_per_tx']} ({runs})",
                "ms",
            )
        )
    out.append(
        Row(
            name,
            "the API process idle, before each round (taken off each shape for as long as "
            "its measurement lasted)",
            ", ".join(f"{idle:g}" for idle in batch["idle_cpu_per_s"]),
            "CPU s per s",
        )
    )
    ratio = batch["batch_100_cpu_vs_single"]
    rounds = batch.get("batch_100_vs_single_per_round")
    shown = f"{ratio} ({', '.join(f'{r:g}' for r in rounds)})" if rounds else ratio
    out.append(
        Row(
            name,
            "API CPU per transaction less the idle process's, batches of 100 / single requests "
            "(median of each round's; each round's)",
            shown,
            "",
            None,
            "",
            f"< {BATCH_CPU_SHARE:g} (issue 30)",
            judge(ratio < BATCH_CPU_SHARE),
        )
    )
    return out


def status_rows(status: dict[str, Any], floor_p99: Any, judge: Judge) -> list[Row]:
    """Each status tier's rows; ``floor_p99`` the bare endpoint's p99, its ceiling."""
    out: list[Row] = []
    for tier, label, limit in (
        ("hit", "Redis hit", STATUS_HIT_P99_MS),
        ("miss", "MySQL (Redis empty)", STATUS_MYSQL_P99_MS),
        ("upstream", "upstream refresh", None),
    ):
        if tier not in status:
            continue
        lat = status[tier]["latency_ms"]
        out.append(
            Row(
                f"status, {label}",
                f"p50 / p99 at {status[tier]['offered_rate']} req/s{_FROM_DUE_LABEL}",
                f"{lat['p50']} / {lat['p99']}{_from_due(status[tier])}",
                "ms",
            )
        )
        out.append(
            Row(
                f"status, {label}",
                "DB round trips per request",
                status[tier].get("db_round_trips_per_request"),
            )
        )
        out.append(
            Row(
                f"status, {label}",
                "p99",
                lat["p99"],
                "ms",
                floor_p99,
                "bare endpoint p99",
                f"<= {limit:g} ms" if limit else "",
                judge(lat["p99"] is not None and lat["p99"] <= limit) if limit else None,
            )
        )
    return out


def pickup_rows(pickup: Any, fast: Any, judge: Judge) -> list[Row]:
    out: list[Row] = []
    if pickup:
        lat = pickup["pickup_ms"]
        out.append(
            Row(
                "pickup (commit -> claim), light load",
                f"p50 / p95 at {pickup['offered_rate']} req/s",
                f"{lat['p50']:.1f} / {lat['p95']:.1f}",
                "ms",
            )
        )
        out.append(
            Row(
                "pickup (commit -> claim), light load",
                "p95",
                round(lat["p95"], 1),
                "ms",
                None,
                "",
                f"<= {PICKUP_P95_MS:g} ms",
                judge(lat["p95"] <= PICKUP_P95_MS),
            )
        )
    if fast:
        lat = fast["pickup_ms"]
        out.append(
            Row(
                f"fast lane pickup, {fast['backlog']:,} normal messages queued",
                f"p50 / p95 / p99 at {fast['offered_rate']} req/s "
                f"({fast['normal_still_pending']:,} normal still pending at the end)",
                f"{lat['p50']:.1f} / {lat['p95']:.1f} / {lat['p99']:.1f}",
                "ms",
            )
        )
    return out


def _seconds(seconds: list[int]) -> str:
    return ",".join(str(s) for s in seconds) if seconds else "none"


def _lags(by_second: dict[str, list[float]]) -> str:
    """``{"3": [41.5, 0.92]}`` (JSON keys) → ``3 (42 ms, 92 % on CPU)``."""
    items = sorted((int(second), lag, share) for second, (lag, share) in by_second.items())
    return (
        ", ".join(f"{second} ({lag:.0f} ms, {share:.0%} on CPU)" for second, lag, share in items)
        or "none"
    )
