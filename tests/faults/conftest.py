"""Fixtures of the fault suite (``make test-faults``): one scenario, one rig of real processes.

Every scenario records its counts; they are printed together at the end of the run."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
from rig import STUB_LIFECYCLE, Processes, Rig
from sqlalchemy.engine import make_url

from relay_core import queue as queue_mod
from relay_core.settings import InfraSettings
from relay_testkit import Stub, start_stub


@pytest.fixture(scope="session", autouse=True)
def _a_server_sized_for_its_clients() -> None:
    """Scenarios run side by side (``make test-faults`` uses three workers), each with up to
    three consumers and an API opening their pools as in production (20 + 4 connections a
    consumer): more than MariaDB's default of 151 connections. Size the server for its
    clients, as the runbook asks of a production database."""
    server = make_url(os.environ.get("TEST_DATABASE_URL", "mysql://root@127.0.0.1:3306"))
    conn = pymysql.connect(
        host=server.host or "127.0.0.1",
        port=server.port or 3306,
        user=server.username or "root",
        password=server.password or "",
        autocommit=True,
    )
    try:
        with conn.cursor() as cursor:
            cursor.execute("SET GLOBAL max_connections = GREATEST(@@max_connections, 600)")
    finally:
        conn.close()


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
    infra_env: dict[str, Any],
    database_url: str,
    sqs: Any,
    fault_stub: Stub,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> AsyncIterator[Rig]:
    env = {**infra_env, "executor_url": fault_stub.base_url}
    settings = InfraSettings(**env)
    await queue_mod.create_queues(sqs, settings)
    processes = Processes(tmp_path, env)
    try:
        lanes = await queue_mod.lane_urls(sqs, settings)
        yield Rig(
            database_url,
            env,
            fault_stub,
            lanes,
            processes,
            tmp_path,
            request.node.user_properties,
        )
    finally:
        processes.stop_all()


RESULTS: list[dict[str, Any]] = []  # every scenario's verdict, printed together at the end


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call":
        RESULTS.extend(value for name, value in report.user_properties if name == "fault")  # type: ignore[misc]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not RESULTS:
        return
    terminalreporter.section(
        "fault scenarios on the shipped defaults: lost / executed twice / stuck / failed "
        "(transient), recovery time"
    )
    for verdict in sorted(RESULTS, key=lambda v: str(v["line"])):
        terminalreporter.write_line(f"{'ok  ' if verdict['clean'] else 'FAIL'} {verdict['line']}")
