"""The progress display: a line per step with its duration, nothing when quiet."""

from __future__ import annotations

import io

from relay_pipeline.progress import Progress


def test_steps_are_numbered_and_timed_on_a_log_stream():
    stream = io.StringIO()
    with Progress(None, total_steps=2, stream=stream) as progress:
        with progress.step("reading"):
            pass
        with progress.step("writing"):
            progress.note("wrote 3 tables")
    lines = stream.getvalue().splitlines()
    assert lines[0] == "[1/2] reading …"
    assert lines[1].startswith("[1/2] reading: ")
    assert lines[1].endswith("s")
    assert lines[2:4] == ["[2/2] writing …", "wrote 3 tables"]


def test_quiet_progress_prints_nothing():
    stream = io.StringIO()
    progress = Progress(None, total_steps=1, enabled=False, stream=stream)
    with progress, progress.step("reading"):
        progress.note("hidden")
    assert stream.getvalue() == ""


def test_status_updates_on_a_log_stream_are_printed_at_most_every_interval():
    """(The reconciliation's running count: a line at once, then one per 10 s off a terminal.)"""
    stream = io.StringIO()
    with Progress(None, total_steps=1, stream=stream) as progress:
        for done in (100, 200, 300):
            progress.update(f"checked {done}")
    assert stream.getvalue().splitlines() == ["checked 100"]
