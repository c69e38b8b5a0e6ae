"""Progress time series and the steady-state window (10 %-90 % of the work) they yield."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from bench import procstat


@dataclass
class Sample:
    t: float
    done: int
    cpu: dict[str, float]


@dataclass
class Sampler:
    """Records (time, work done, CPU seconds of each watched process) on every ``take``."""

    pids: dict[str, int]
    samples: list[Sample] = field(default_factory=list)

    def take(self, done: int) -> Sample:
        cpu = {}
        for name, pid in self.pids.items():
            value = procstat.cpu_seconds(pid)
            if value is not None:
                cpu[name] = value
        sample = Sample(time.perf_counter(), done, cpu)
        self.samples.append(sample)
        return sample

    def window(self, total: int, lo: float = 0.1, hi: float = 0.9) -> dict[str, object]:
        """Rate and CPU between the first samples at or past ``lo`` and ``hi`` of ``total``;
        start-up and the tail are left out. Falls back to the whole series when it is short."""
        series = self.samples
        first = next((s for s in series if s.done >= lo * total), None)
        last = next((s for s in series if s.done >= hi * total), None)
        whole = False
        if first is None or last is None or last.t - first.t <= 0 or last.done <= first.done:
            first, last, whole = series[0], series[-1], True
        seconds = max(last.t - first.t, 1e-9)
        messages = last.done - first.done
        cpu = {
            name: round(last.cpu[name] - first.cpu[name], 3)
            for name in last.cpu
            if name in first.cpu
        }
        return {
            "rate": round(messages / seconds, 1),
            "seconds": round(seconds, 2),
            "messages": messages,
            "cpu_s": cpu,
            "whole_run": whole,
        }
