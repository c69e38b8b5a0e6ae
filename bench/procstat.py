"""Process and machine figures from /proc (Linux): CPU seconds, peak RSS, load, busy neighbours."""

from __future__ import annotations

import os
import time
from pathlib import Path

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds the process has used so far (None once it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def memory_mb(pid: int, field: str = "VmHWM") -> float | None:
    """VmHWM (peak resident set) or VmRSS of a live process, in MiB."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return None


def command_name(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    parts = [p.decode(errors="replace") for p in raw.split(b"\0") if p]
    if not parts:
        try:
            return Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            return "?"
    # "python -m x" and "/path/to/bin/tool args": keep the part that says what it is.
    words = [p.rsplit("/", 1)[-1] for p in parts[:4]]
    return " ".join(words)[:80]


def find_pids(comm: str) -> list[int]:
    """Pids whose /proc/PID/comm is ``comm`` (e.g. mariadbd, redis-server)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == comm:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def machine() -> dict[str, object]:
    load1, load5, load15 = os.getloadavg()
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "loadavg": [round(load1, 2), round(load5, 2), round(load15, 2)],
    }


def busy_processes(sample_s: float = 1.0, top: int = 8, exclude: set[int] | None = None) -> list:
    """The processes that used the most CPU over ``sample_s`` (the machine is shared)."""
    exclude = exclude or set()

    def snapshot() -> dict[int, float]:
        values = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) not in exclude:
                cpu = cpu_seconds(int(entry.name))
                if cpu is not None:
                    values[int(entry.name)] = cpu
        return values

    before = snapshot()
    time.sleep(sample_s)
    after = snapshot()
    usage = [
        (after[pid] - before[pid], pid)
        for pid in after
        if pid in before and after[pid] > before[pid]
    ]
    usage.sort(reverse=True)
    return [
        {"pid": pid, "cpu_pct": round(100 * used / sample_s), "command": command_name(pid)}
        for used, pid in usage[:top]
    ]
