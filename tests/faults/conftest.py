"""Fixtures of the fault suite (``make test-faults``): one scenario, one rig of real processes.

Every scenario records its counts; they are printed together at the end of the run."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from rig import RESULTS, Processes, Rig

from relay_core import queue as queue_mod
from relay_core.settings import InfraSettings
from relay_testkit import Stub, start_stub

# The executor walks every transaction to `confirmed` quickly; the consumers' tracker follows.
STUB_LIFECYCLE = {
    "paused": False,
    "delay_sent_ms": 50,
    "delay_submitted_ms": 50,
    "delay_mined_ms": 50,
    "delay_confirmed_ms": 50,
}


@pytest.fixture
def fault_stub(tmp_path: Path) -> Iterator[Stub]:
    """A relayer-stub of the scenario's own: some scenarios kill it."""
    stub = start_stub(tmp_path, STUB_LIFECYCLE=json.dumps(STUB_LIFECYCLE), STUB_LOG_LEVEL="WARNING")
    try:
        yield stub
    finally:
        stub.kill()


@pytest.fixture
async def rig(
    infra_env: dict[str, Any], database_url: str, sqs: Any, fault_stub: Stub, tmp_path: Path
) -> AsyncIterator[Rig]:
    env = {**infra_env, "executor_url": fault_stub.base_url}
    queues = await queue_mod.create_queues(sqs, InfraSettings(**env))
    processes = Processes(tmp_path, env)
    try:
        yield Rig(database_url, env, fault_stub, queues, processes, tmp_path)
    finally:
        processes.stop_all()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not RESULTS:
        return
    terminalreporter.section("fault scenarios: lost / executed twice / stuck / failed (transient)")
    for counts in RESULTS:
        verdict = "ok  " if counts.clean else "FAIL"
        terminalreporter.write_line(f"{verdict} {counts.line()}")
