"""Benchmark: ``relay-pipeline report --archive`` over a month whose history is in the archive.

Not a test. For one size it

1. seeds 30 days of history ending now into a fresh database (``relay_bench_archive_<size>``),
2. optionally reports over the whole month from the database alone (the reference figures),
3. archives everything but the last day (``archive --older-than``, the cutoff being the end of
   the seeded history minus one day),
4. reports over the month with ``--archive`` from an empty derived cache (first run: builds the
   per-date lifecycles of every archived date), then once more unchanged (warm),
5. seeds one more day into the database tail and reports over the month ending a day later
   (the re-run: one more day in the tail, the window moved by a day).

``--phase prepare`` stops after step 3 and prints the work directory; ``--phase measure --work
DIR`` runs steps 4 and 5 on it (once: step 5 adds a day).

Seeding and archiving are timed apart from the reports. Each timed report runs as a child
process on ``local[2]`` while this process holds ``/tmp/relay-measure.lock`` (so two timed runs
of different benchmarks never overlap), and the resident memory of the child's whole process
tree (Python driver + JVM) is sampled every 0.2 s. One JSON file is written per size.

    uv run python services/pipeline/bench/archive_report_bench.py --rows 1000000
        [--server mysql://root@127.0.0.1:3306] [--results services/pipeline/bench/results]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from report_bench import _label, _loadavg, _recreate, _server, _tree_rss_bytes
from sqlalchemy.engine import make_url

from relay_pipeline.history.window import utcnow

DAYS = 30
LOCK = "/tmp/relay-measure.lock"  # noqa: S108 (shared with the other benchmarks on purpose)
# The figures a report over the same history must share, whatever it read.
COMPARED = (
    "totals",
    "top_failure_reasons",
    "attempts_histogram",
    "throughput_per_hour",
    "by_client",
    "stage_latency_ms",
)


def _pipeline(*args: str) -> list[str]:
    return [sys.executable, "-m", "relay_pipeline", *args]


def _spark_args(driver_memory: str) -> list[str]:
    return [
        "--master", "local[2]", "--conf", f"spark.driver.memory={driver_memory}",
        "--conf", "spark.ui.enabled=false",
    ]  # fmt: skip


def _plain(command: list[str]) -> dict[str, Any]:
    """Run a step that is timed but not measured under the lock (seeding, archiving)."""
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")
    began = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"step failed ({done.returncode}): {' '.join(command[1:])}")
    return {
        "command": " ".join(command[1:]),
        "wall_s": round(time.monotonic() - began, 1),
        "stdout": done.stdout.strip(),
    }


def _measured(command: list[str], log: Path) -> dict[str, Any]:
    """Run a report under the measurement lock, sampling the process tree's memory."""
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        before = _loadavg()
        began = time.monotonic()
        with log.open("w") as stderr:
            process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env
            )
            peak = 0
            while process.poll() is None:
                peak = max(peak, _tree_rss_bytes(process.pid))
                time.sleep(0.2)
        wall = time.monotonic() - began
        after = _loadavg()
    stdout = process.stdout.read() if process.stdout else ""
    if process.returncode != 0:
        sys.stderr.write(log.read_text()[-4000:])
        raise SystemExit(f"report failed ({process.returncode}): {' '.join(command[1:])}")
    return {
        "command": " ".join(command[1:]),
        "wall_s": round(wall, 1),
        "peak_rss_mb": round(peak / 2**20),
        "loadavg_before": before,
        "loadavg_after": after,
        "steps": [
            line.strip()
            for line in log.read_text().splitlines()
            if line.startswith("[") and line.rstrip().endswith("s")
        ],
        "stdout": stdout.strip().splitlines(),
        "measured_at": datetime.now().isoformat(timespec="seconds"),
    }


def _report(
    database_url: str,
    window: tuple[datetime, datetime],
    out: Path,
    archive: Path | None,
    driver_memory: str,
    archive_only: bool = False,
) -> dict[str, Any]:
    since, until = window
    command = _pipeline(
        "report", "--database-url", database_url, "--since", since.isoformat(),
        "--until", until.isoformat(), "--now", until.isoformat(), "--out", str(out),
        *(["--archive", str(archive)] if archive is not None else []),
        *(["--archive-only"] if archive_only else []),
        *_spark_args(driver_memory),
    )  # fmt: skip
    record = _measured(command, out.with_suffix(".log"))
    summary = json.loads((out / "summary.json").read_text())
    record["elapsed_in_job_s"] = summary["elapsed_s"]
    record["figures"] = {key: summary[key] for key in COMPARED}
    return record


def _differences(reference: dict[str, Any], other: dict[str, Any]) -> list[str]:
    return [key for key in COMPARED if reference["figures"][key] != other["figures"][key]]


def _urls(server_url: str, rows: int) -> tuple[str, str]:
    name = f"relay_bench_archive_{_label(rows)}"
    return name, make_url(server_url).set(database=name).render_as_string(hide_password=False)


def prepare(rows: int, server_url: str, driver_memory: str, reference: bool) -> Path:
    """Seed, report from the database alone (optional), archive; the state goes to
    ``<work>/bench.json`` for ``measure``."""
    label = _label(rows)
    name, database_url = _urls(server_url, rows)
    work = Path(tempfile.mkdtemp(prefix=f"relay-archive-bench-{label}-"))
    end = utcnow().replace(microsecond=0)
    record: dict[str, Any] = {
        "benchmark": "relay-pipeline report --archive (incremental)",
        "rows": rows,
        "database": name,
        "master": "local[2]",
        "driver_memory": driver_memory,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "history_end": end.isoformat(),
        "work_dir": str(work),
    }
    _recreate(server_url, name)
    record["seed"] = _plain(
        _pipeline(
            "seed", "--rows", str(rows), "--days", str(DAYS), "--end", end.isoformat(),
            "--database-url", database_url, "--quiet",
        )
    )  # fmt: skip
    record["seed"].pop("stdout")
    month = (end - timedelta(days=DAYS), end)
    if reference:
        record["reference_database_only"] = _report(
            database_url, month, work / "reference", None, driver_memory
        )
    # Everything finished before the last day of history goes to the archive.
    older_than = (utcnow() - (end - timedelta(days=1))).total_seconds()
    record["archive"] = _plain(
        _pipeline(
            "archive", "--older-than", f"{older_than:.0f}s", "--out", str(work / "archive"),
            "--database-url", database_url, "--quiet", *_spark_args(driver_memory),
        )
    )  # fmt: skip
    result = json.loads(record["archive"].pop("stdout"))
    record["archive"].update({key: result[key] for key in ("due", "written", "deleted")})
    (work / "bench.json").write_text(json.dumps(record, indent=2))
    return work


def _server_settings(server_url: str) -> dict[str, Any]:
    """What of the database server's configuration moves these figures (the archive's deletes
    and the JDBC reads): its buffer pool above all, which MariaDB's packages leave at 128 MiB."""
    conn = _server(server_url)
    try:
        with conn.cursor() as cursor:
            cursor.execute(
                "SELECT @@version, @@innodb_buffer_pool_size, @@innodb_flush_log_at_trx_commit"
            )
            version, pool, flush = cursor.fetchone()
    finally:
        conn.close()
    return {
        "version": version,
        "innodb_buffer_pool_size_mib": int(pool) // 2**20,
        "innodb_flush_log_at_trx_commit": int(flush),
    }


def measure(
    work: Path, server_url: str, results: Path, archive_only: bool = False
) -> dict[str, Any]:
    """The timed reports over a prepared work directory (once: it adds a day to the tail).

    ``archive_only``: the first and warm reports read the archive alone (``--archive-only``),
    and there is no re-run; for an archive whose run was stopped before its deletes."""
    record = json.loads((work / "bench.json").read_text())
    record["database_server"] = _server_settings(server_url)
    rows, driver_memory = record["rows"], record["driver_memory"]
    _, database_url = _urls(server_url, rows)
    archive = work / "archive"
    shutil.rmtree(archive / "_derived", ignore_errors=True)
    end = datetime.fromisoformat(record["history_end"])
    month = (end - timedelta(days=DAYS), end)
    for run in ("first", "warm"):
        record[run] = _report(database_url, month, work / run, archive, driver_memory, archive_only)
    if archive_only:
        record["archive_only"] = True
        return _written(record, work, results)

    next_end = end + timedelta(days=1)
    record["add_day_seed"] = _plain(
        _pipeline(
            "seed", "--rows", str(rows // DAYS), "--days", "1", "--end", next_end.isoformat(),
            "--database-url", database_url, "--no-migrate", "--quiet",
        )
    )  # fmt: skip
    record["add_day_seed"].pop("stdout")
    next_month = (next_end - timedelta(days=DAYS), next_end)
    record["rerun"] = _report(database_url, next_month, work / "rerun", archive, driver_memory)

    if "reference_database_only" in record:
        differs = _differences(record["reference_database_only"], record["first"])
        record["first_equals_database_only"] = not differs
        record["first_differs_in"] = differs
    return _written(record, work, results)


def _written(record: dict[str, Any], work: Path, results: Path) -> dict[str, Any]:
    archive = work / "archive"
    suffix = "-archive-only" if record.get("archive_only") else ""
    record["derived_bytes"] = sum(
        p.stat().st_size for p in (archive / "_derived").rglob("*") if p.is_file()
    )
    record["archive_bytes"] = sum(
        p.stat().st_size for p in archive.rglob("*") if p.is_file() and "_derived" not in p.parts
    )
    results.mkdir(parents=True, exist_ok=True)
    path = results / f"pipeline-archive-report-{_label(record['rows'])}{suffix}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    runs = [(name, record[name]) for name in ("first", "warm", "rerun") if name in record]
    sys.stdout.write(
        f"{path}: seed {record['seed']['wall_s']} s, archive "
        f"{record.get('archive', {}).get('wall_s')} s, "
        + ", ".join(f"{name} {run['wall_s']} s" for name, run in runs)
        + "\n"
    )
    return record


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument(
        "--server", default=os.environ.get("TEST_DATABASE_URL", "mysql://root@127.0.0.1:3306")
    )
    parser.add_argument("--results", default="services/pipeline/bench/results")
    parser.add_argument("--driver-memory", default="6g")
    parser.add_argument(
        "--phase",
        choices=("all", "prepare", "measure"),
        default="all",
        help="prepare: seed, reference, archive (prints the work directory); measure: the "
        "timed reports over --work",
    )
    parser.add_argument("--work", help="the work directory `--phase prepare` printed")
    parser.add_argument(
        "--no-reference",
        action="store_true",
        help="skip the database-only report of the month before archiving",
    )
    parser.add_argument("--keep", action="store_true", help="keep the archive and reports")
    parser.add_argument(
        "--archive-only",
        action="store_true",
        help="measure: the first and warm reports from the archive alone, no re-run (an "
        "archive whose run was stopped before its deletes)",
    )
    args = parser.parse_args()
    if args.phase == "measure":
        if not args.work:
            parser.error("--phase measure needs --work")
        work = Path(args.work)
    else:
        work = prepare(args.rows, args.server, args.driver_memory, not args.no_reference)
        sys.stdout.write(f"prepared {work}\n")
        if args.phase == "prepare":
            return 0
    measure(work, args.server, Path(args.results), args.archive_only)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
