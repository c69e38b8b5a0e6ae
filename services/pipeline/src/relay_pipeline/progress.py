"""Progress display on stderr: the current step, and live task counts of running Spark stages.

On a terminal one line is redrawn in place; otherwise (logs, CI) a line is printed per step and
at most every ``interval`` seconds while a step runs.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from pyspark import SparkContext

BAR = 24


class Progress:
    def __init__(
        self,
        context: SparkContext | None,
        *,
        total_steps: int,
        enabled: bool = True,
        stream: TextIO | None = None,
    ) -> None:
        self._context = context
        self._total = total_steps
        self._enabled = enabled
        self._stream = stream or sys.stderr
        self._tty = self._stream.isatty()
        self._interval = 0.5 if self._tty else 10.0
        self._index = 0
        self._step = ""
        self._started = time.monotonic()
        self._last_update = float("-inf")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Progress:
        if self._enabled and self._context is not None:
            self._thread = threading.Thread(target=self._poll, name="progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        self._clear()

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        with self._lock:
            self._index += 1
            self._step = name
            began = time.monotonic()
        if self._context is not None:
            self._context.setJobDescription(name)
        self.note(f"[{self._index}/{self._total}] {name} …")
        try:
            yield
        finally:
            self.note(f"[{self._index}/{self._total}] {name}: {time.monotonic() - began:.1f}s")

    def note(self, line: str) -> None:
        """A line that stays (a step boundary, a checkpoint)."""
        if not self._enabled:
            return
        with self._lock:
            self._clear()
            self._stream.write(line + "\n")
            self._stream.flush()

    def update(self, status: str) -> None:
        """A status line of work outside Spark (the reconciliation's count of checked
        transactions), replaced by the next: redrawn in place on a terminal, otherwise printed
        at most every ``interval`` seconds."""
        if not self._enabled:
            return
        now = time.monotonic()
        with self._lock:
            if self._tty:
                self._stream.write("\r\033[K" + status[:160])
            elif now - self._last_update >= self._interval:
                self._stream.write(status + "\n")
                self._last_update = now
            else:
                return
            self._stream.flush()

    def _clear(self) -> None:
        if self._tty and self._enabled:
            self._stream.write("\r\033[K")
            self._stream.flush()

    def _poll(self) -> None:
        last_print = 0.0
        while not self._stop.wait(0.5):
            status = self._stage_status()
            if not status:
                continue
            now = time.monotonic()
            line = f"[{self._index}/{self._total}] {self._step}: {status}"
            with self._lock:
                if self._tty:
                    self._stream.write("\r\033[K" + line[:160])
                    self._stream.flush()
                elif now - last_print >= self._interval:
                    self._stream.write(line + "\n")
                    self._stream.flush()
                    last_print = now

    def _stage_status(self) -> str:
        assert self._context is not None
        try:
            tracker = self._context.statusTracker()
            done = total = running = 0
            for stage_id in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage_id)
                if info is None:
                    continue
                done += info.numCompletedTasks
                total += info.numTasks
                running += info.numActiveTasks
        except Exception:  # the context is stopping; the display is best-effort
            return ""
        if total == 0:
            return ""
        filled = BAR * done // total
        elapsed = time.monotonic() - self._started
        return (
            f"▕{'█' * filled}{'░' * (BAR - filled)}▏ {done}/{total} tasks, "
            f"{running} running, {elapsed:.0f}s elapsed"
        )
