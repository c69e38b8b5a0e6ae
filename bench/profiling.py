"""py-spy attached to a running process (``--profile``), and a text summary of what it saw.

py-spy samples the process from outside at 100 Hz (idle threads left out; each sample pauses
the process for microseconds), so the profiled process runs unmodified. The raw output is
collapsed stacks, one ``frames count`` line each; ``summarize`` turns it into the share of CPU
samples by library (leaf frame) and the inclusive share of the relay's own functions.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^:()]+)(?::\d+)?\)$")

LIBRARIES = [
    ("sqlalchemy", "sqlalchemy"),
    ("asyncmy", "asyncmy (MySQL driver)"),
    ("pymysql", "asyncmy (MySQL driver)"),
    ("aiobotocore", "aiobotocore/botocore (SQS client)"),
    ("botocore", "aiobotocore/botocore (SQS client)"),
    ("aiohttp", "aiohttp (under aiobotocore)"),
    ("httpx", "httpx/httpcore (executor client)"),
    ("httpcore", "httpx/httpcore (executor client)"),
    ("h11", "httpx/httpcore (executor client)"),
    ("redis", "redis-py"),
    ("uvicorn", "uvicorn"),
    ("starlette", "starlette/fastapi"),
    ("fastapi", "starlette/fastapi"),
    ("pydantic", "pydantic"),
    ("logging", "logging"),
    ("relay_core/logs", "logging"),
    ("asyncio", "asyncio event loop"),
    ("selectors", "asyncio event loop"),
    ("json", "json/orjson"),
    ("orjson", "json/orjson"),
    ("relay_core/http", "relay_wire.http (executor, SQS)"),
    ("httptools", "relay_wire.http (executor, SQS)"),
    ("relay_core", "relay code"),
    ("relay_api", "relay code"),
    ("queue_consumer", "relay code"),
    ("greenlet", "sqlalchemy"),
    ("uuid", "stdlib (uuid, datetime, ...)"),
]
_RELAY = ("relay_core/", "relay_api/", "queue_consumer/")
_IDLE_LEAVES = {"Condition.wait", "Event.wait", "Semaphore.acquire"}


def available() -> bool:
    return _executable() is not None


def _executable() -> str | None:
    local = Path(sys.executable).with_name("py-spy")
    return str(local) if local.exists() else shutil.which("py-spy")


def start(pid: int, out: Path) -> subprocess.Popen[bytes]:
    executable = _executable()
    if executable is None:
        raise RuntimeError("py-spy is not installed (uv sync installs the dev group)")
    out.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [
            executable,
            "record",
            "--pid",
            str(pid),
            "--rate",
            os.environ.get("BENCH_PROFILE_HZ", "100"),
            "--format",
            "raw",
            "--output",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(out.with_suffix(".log"), "wb"),
    )


def stop(process: subprocess.Popen[bytes]) -> None:
    """py-spy writes its output when interrupted."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _library(path: str) -> str:
    for needle, name in LIBRARIES:
        if f"/{needle}/" in path or f"/{needle}." in path or path.startswith(needle):
            return name
    return "other"


def _parse(frame: str) -> tuple[str, str]:
    match = _FRAME.match(frame)
    if not match:
        return frame, ""
    return match["func"], match["file"]


def summarize(raw: Path, top: int = 25) -> dict[str, Any]:
    by_library: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    relay_inclusive: Counter[str] = Counter()
    total = 0
    idle = 0
    with contextlib.suppress(FileNotFoundError):
        for line in raw.read_text().splitlines():
            stack, _, count_text = line.rpartition(" ")
            if not stack or not count_text.isdigit():
                continue
            count = int(count_text)
            frames = [_parse(f) for f in stack.split(";")]
            func, path = frames[-1]
            if func in _IDLE_LEAVES and path.endswith("threading.py"):
                # Worker threads parked on a lock: py-spy does not always see them as idle.
                idle += count
                continue
            total += count
            by_library[_library(path)] += count
            short = path.split("site-packages/")[-1].split("/src/")[-1]
            leaf[f"{func} ({short})"] += count
            seen = set()
            for func_name, frame_path in frames:
                if any(part in frame_path for part in _RELAY):
                    module = frame_path.split("/src/")[-1].removesuffix(".py").replace("/", ".")
                    seen.add(f"{module}.{func_name}")
            for name in seen:
                relay_inclusive[name] += count

    def shares(counter: Counter[str], n: int) -> list[tuple[str, float]]:
        return [(k, round(100 * v / total, 1)) for k, v in counter.most_common(n)] if total else []

    return {
        "samples": total,
        "idle_samples_dropped": idle,
        "by_library_pct": shares(by_library, 30),
        "top_leaf_pct": shares(leaf, top),
        "relay_inclusive_pct": shares(relay_inclusive, top),
    }


def render(title: str, summary: dict[str, Any]) -> str:
    lines = [
        f"### {title} ({summary['samples']} samples at 100 Hz; "
        f"{summary.get('idle_samples_dropped', 0)} idle worker-thread samples left out)",
        "",
        "SQLAlchemy's async work runs in greenlets, whose stacks py-spy reports apart from the",
        "task that started them, so inclusive shares of relay functions above SQLAlchemy calls",
        "are understated; the by-library shares are not affected.",
        "",
    ]
    for key, heading in (
        ("by_library_pct", "CPU samples by library (leaf frame)"),
        ("relay_inclusive_pct", "Relay functions, inclusive"),
        ("top_leaf_pct", "Hottest leaf functions"),
    ):
        lines += [f"{heading}:", ""]
        lines += [f"- {pct:5.1f} %  {name}" for name, pct in summary[key]]
        lines.append("")
    return "\n".join(lines)
