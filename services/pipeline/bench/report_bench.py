"""Benchmark: ``relay-pipeline report`` over seeded histories of 1 M and 10 M transactions.

Not a test: it seeds (once; a database already holding the right number of rows is reused),
runs the report as a child process on ``local[2]``, samples the resident memory of the whole
process tree (Python driver + JVM) every 0.2 s, and writes one JSON file per size.

    uv run python services/pipeline/bench/report_bench.py [--sizes 1000000,10000000]
        [--server mysql://root@127.0.0.1:3306] [--results bench/results]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import pymysql
from sqlalchemy.engine import make_url

END = datetime(2026, 11, 1)
DAYS = 30
TARGET_10M_S = 300.0


def _label(rows: int) -> str:
    return f"{rows // 1_000_000}m" if rows % 1_000_000 == 0 else str(rows)


def _tree_rss_bytes(root_pid: int) -> int:
    """Resident memory of a process and all its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            ppid, pages = int(fields[1]), int(fields[21])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
        rss[int(entry)] = pages * page
    total, stack = 0, [root_pid]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total


def _server(url: str) -> pymysql.connections.Connection:
    parsed = make_url(url)
    return pymysql.connect(
        host=parsed.host or "127.0.0.1",
        port=parsed.port or 3306,
        user=parsed.username or "root",
        password=parsed.password or "",
        autocommit=True,
    )


def _count(server_url: str, name: str) -> tuple[int, int] | None:
    conn = _server(server_url)
    try:
        with conn.cursor() as cursor:
            cursor.execute(
                "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (name,)
            )
            if cursor.fetchone() is None:
                return None
            cursor.execute(
                "SELECT COUNT(*) FROM information_schema.tables "
                "WHERE table_schema = %s AND table_name IN ('transactions', 'transaction_events')",
                (name,),
            )
            if cursor.fetchone()[0] != 2:
                return None
            cursor.execute(f"SELECT COUNT(*) FROM `{name}`.transactions")
            tx = int(cursor.fetchone()[0])
            cursor.execute(f"SELECT COUNT(*) FROM `{name}`.transaction_events")
            return tx, int(cursor.fetchone()[0])
    finally:
        conn.close()


def _recreate(server_url: str, name: str) -> None:
    conn = _server(server_url)
    try:
        with conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
            cursor.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    finally:
        conn.close()


def _loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def run(rows: int, server_url: str, results: Path, driver_memory: str) -> dict:
    name = f"relay_bench_{_label(rows)}"
    database_url = make_url(server_url).set(database=name).render_as_string(hide_password=False)
    record: dict = {
        "benchmark": "relay-pipeline report",
        "rows": rows,
        "database": name,
        "master": "local[2]",
        "driver_memory": driver_memory,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }
    counts = _count(server_url, name)
    if counts is None or counts[0] != rows:
        _recreate(server_url, name)
        began = time.monotonic()
        subprocess.run(
            [
                sys.executable, "-m", "relay_pipeline", "seed", "--rows", str(rows),
                "--days", str(DAYS), "--end", END.isoformat(), "--database-url", database_url,
                "--quiet",
            ],
            check=True,
        )  # fmt: skip
        record["seed_s"] = round(time.monotonic() - began, 1)
        counts = _count(server_url, name)
    assert counts is not None
    record["transactions"], record["events"] = counts

    out = Path(tempfile.mkdtemp(prefix=f"relay-bench-{_label(rows)}-"))
    command = [
        sys.executable, "-m", "relay_pipeline", "report",
        "--database-url", database_url,
        "--since", (END - timedelta(days=DAYS)).isoformat(), "--until", END.isoformat(),
        "--now", END.isoformat(), "--out", str(out), "--master", "local[2]",
        "--conf", f"spark.driver.memory={driver_memory}", "--conf", "spark.ui.enabled=false",
    ]  # fmt: skip
    record["command"] = " ".join(command[1:])
    record["loadavg_before"] = _loadavg()
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")
    log = out / "report.log"
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
    stdout = process.stdout.read() if process.stdout else ""
    record.update(
        {
            "exit_code": process.returncode,
            "wall_s": round(wall, 1),
            "peak_rss_mb": round(peak / 2**20),
            "loadavg_after": _loadavg(),
            "steps": [
                line.strip()
                for line in log.read_text().splitlines()
                if line.startswith("[") and line.rstrip().endswith("s")
            ],
            "stdout": stdout.strip().splitlines(),
            "output": str(out),
            "measured_at": datetime.now().isoformat(timespec="seconds"),
        }
    )
    if rows >= 10_000_000:
        record["target_s"] = TARGET_10M_S
        record["target_met"] = process.returncode == 0 and wall < TARGET_10M_S
    results.mkdir(parents=True, exist_ok=True)
    path = results / f"pipeline-report-{_label(rows)}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    sys.stdout.write(f"{path}: {record['wall_s']} s, peak {record['peak_rss_mb']} MiB\n")
    return record


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument(
        "--server", default=os.environ.get("TEST_DATABASE_URL", "mysql://root@127.0.0.1:3306")
    )
    parser.add_argument("--results", default="bench/results")
    parser.add_argument("--driver-memory", default="6g")
    args = parser.parse_args()
    failed = 0
    for size in (int(s) for s in args.sizes.split(",")):
        record = run(size, args.server, Path(args.results), args.driver_memory)
        failed |= record["exit_code"] != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
