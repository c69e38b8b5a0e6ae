"""Pipeline test fixtures: one SparkSession per test session, a scratch MariaDB database per
test (created from the models, dropped afterwards), and a builder for hand-made history."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pymysql
import pytest
from sqlalchemy import create_engine, insert
from sqlalchemy.engine import Engine, make_url

from relay_core.db.models import ApiClient, Base, Transaction, TransactionEvent
from relay_pipeline.database import Database, database_from_url
from relay_pipeline.settings import PipelineSettings

SERVER = make_url(os.environ.get("TEST_DATABASE_URL", "mysql://root@127.0.0.1:3306"))
T0 = datetime(2026, 3, 2, 10, 0, 0)
COST_COLUMNS = ("relayer", "block_number", "gas_used", "effective_gas_price", "fee_wei")


def _server() -> pymysql.connections.Connection:
    return pymysql.connect(
        host=SERVER.host or "127.0.0.1",
        port=SERVER.port or 3306,
        user=SERVER.username or "root",
        password=SERVER.password or "",
        autocommit=True,
    )


@pytest.fixture(scope="session")
def pipeline_settings() -> PipelineSettings:
    return PipelineSettings(jdbc_partitions=2, shuffle_partitions=2, queue_visibility_timeout_s=60)


@pytest.fixture(scope="session")
def spark(pipeline_settings: PipelineSettings) -> Iterator[Any]:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from relay_pipeline.spark import build_session

    session = build_session(
        pipeline_settings,
        app_name="relay-pipeline-tests",
        master="local[2]",
        conf={
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.sql.adaptive.coalescePartitions.enabled": "true",
        },
    )
    yield session
    session.stop()


@dataclass
class ScratchDatabase:
    url: str
    engine: Engine
    db: Database

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        conn = pymysql.connect(
            host=self.db.host,
            port=self.db.port,
            user=self.db.user or "root",
            password=self.db.password or "",
            database=self.db.name,
        )
        try:
            with conn.cursor() as cursor:
                cursor.execute(sql)
                return list(cursor.fetchall())
        finally:
            conn.close()


@contextmanager
def scratch_database() -> Iterator[ScratchDatabase]:
    """A fresh MariaDB database with the Relay schema (from the models), dropped afterwards."""
    name = f"relay_pl_{uuid.uuid4().hex[:12]}"
    server = _server()
    try:
        with server.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    finally:
        server.close()
    url = SERVER.set(database=name).render_as_string(hide_password=False)
    engine = create_engine(SERVER.set(drivername="mysql+pymysql", database=name))
    Base.metadata.create_all(engine)
    try:
        yield ScratchDatabase(url=url, engine=engine, db=database_from_url(url))
    finally:
        engine.dispose()
        server = _server()
        try:
            with server.cursor() as cursor:
                cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
        finally:
            server.close()


@pytest.fixture
def scratch_mysql() -> Iterator[ScratchDatabase]:
    with scratch_database() as scratch:
        yield scratch


@pytest.fixture(scope="module")
def module_mysql() -> Iterator[ScratchDatabase]:
    """One scratch database shared by a module's tests (they only read it)."""
    with scratch_database() as scratch:
        yield scratch


def ms(value: float) -> timedelta:
    return timedelta(milliseconds=value)


@dataclass
class HistoryBuilder:
    """Transactions with explicit timestamps and the event trail the consumer writes.

    ``path`` lists (status, ms after the previous step, source, reason); the row's status,
    ``claimed_at``/``submitted_at``/``confirmed_at`` and ``updated_at`` follow from it.
    """

    engine: Engine
    client_id: str = "client-a"
    transactions: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)

    def tx(
        self,
        created: datetime,
        path: list[tuple[str, float] | tuple[str, float, str, str | None]] = (),  # type: ignore[assignment]
        *,
        type: str = "direct",
        speed: str | None = "fast",
        client_id: str | None = None,
        attempts: int | None = None,
        error: str | None = None,
        status: str | None = None,
        enqueued: bool = True,
        with_events: bool = True,
        updated_at: datetime | None = None,
        value: str = "0",
        cost: dict[str, Any] | None = None,
    ) -> str:
        """``cost``: the receipt's columns (relayer, block_number, gas_used,
        effective_gas_price, fee_wei); every row has all of them, NULL unless given."""
        tx_id = str(uuid.uuid4())
        at = created
        state = "pending"
        stamps: dict[str, datetime] = {}
        trail = []
        for step in path:
            to, delay = step[0], step[1]
            source = step[2] if len(step) > 2 else _default_source(to)  # type: ignore[misc]
            reason = step[3] if len(step) > 3 else None  # type: ignore[misc]
            at = at + ms(delay)
            trail.append((state, to, source, reason, at))
            stamps.setdefault(to, at)
            if to == "processing":
                stamps["last_claim"] = at
            state = to
        request: dict[str, Any] = {"to": "0x" + "11" * 20, "data": "0x", "value": value}
        if type == "gasless":
            request = {"request": {"from": "0x" + "22" * 20, "nonce": "1"}, "signature": "0x00"}
        elif speed is not None:
            request["speed"] = speed
        self.transactions.append(
            {
                "id": tx_id,
                "client_id": client_id or self.client_id,
                "type": type,
                "status": status or state,
                "version": 1 + len(trail),
                "request": request,
                "error": error,
                "attempts": attempts
                if attempts is not None
                else sum(1 for t in trail if t[1] == "processing"),
                "request_fingerprint": uuid.uuid4().hex * 2,
                "enqueued_at": created + ms(5) if enqueued else None,
                "claimed_at": stamps.get("last_claim"),
                "claimed_by": "consumer-1" if "last_claim" in stamps else None,
                "created_at": created,
                "updated_at": updated_at or at,
                "submitted_at": stamps.get("submitted"),
                "confirmed_at": stamps.get("confirmed"),
                **dict.fromkeys(COST_COLUMNS),
                **(cost or {}),
            }
        )
        if with_events:
            for before, after, source, reason, when in trail:
                self.events.append(
                    {
                        "transaction_id": tx_id,
                        "from_status": before,
                        "to_status": after,
                        "source": source,
                        "reason": reason,
                        "created_at": when,
                    }
                )
        return tx_id

    def save(self) -> None:
        with self.engine.begin() as conn:
            clients = {t["client_id"] for t in self.transactions}
            existing = {row[0] for row in conn.execute(ApiClient.__table__.select()).all()}
            for client in sorted(clients - existing):
                conn.execute(
                    insert(ApiClient.__table__),
                    {
                        "id": client,
                        "name": client,
                        "role": "client",
                        "key_hash": uuid.uuid4().hex * 2,
                        "key_prefix": "test",
                        "created_at": T0,
                    },
                )
            if self.transactions:
                conn.execute(insert(Transaction.__table__), self.transactions)
            if self.events:
                conn.execute(insert(TransactionEvent.__table__), self.events)
        self.transactions, self.events = [], []


def _default_source(to_status: str) -> str:
    return {
        "processing": "consumer.claim",
        "pending": "consumer.retry",
        "submitted": "consumer.submit",
        "mined": "executor.webhook",
        "confirmed": "executor.webhook",
    }.get(to_status, "consumer.dlq" if to_status == "failed" else "executor.webhook")


@pytest.fixture
def history(scratch_mysql: ScratchDatabase) -> HistoryBuilder:
    return HistoryBuilder(scratch_mysql.engine)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Spark jobs share two cores with MariaDB (and, on a busy machine, with everything else):
    give this package's tests more than the workspace's default per-test timeout."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.path).parents and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(300))
