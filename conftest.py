"""Fixtures shared by every test package: real MariaDB, Redis and SQS on 127.0.0.1.

Each test gets its own MariaDB database (created from the models, dropped afterwards), its
own SQS queue names and its own Redis key prefix, so tests never see each other's data.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pymysql
import pytest
from sqlalchemy import create_engine
from sqlalchemy.engine import URL, make_url

from relay_core import queue as queue_mod
from relay_core.db.models import Base
from relay_devstack import localsqs
from relay_testkit import Stub, start_stub

SERVER_URL = make_url(os.environ.get("TEST_DATABASE_URL", "mysql://root@127.0.0.1:3306"))
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def _server_connection() -> pymysql.connections.Connection:
    return pymysql.connect(
        host=SERVER_URL.host or "127.0.0.1",
        port=SERVER_URL.port or 3306,
        user=SERVER_URL.username or "root",
        password=SERVER_URL.password or "",
        autocommit=True,
    )


def create_database(name: str) -> URL:
    conn = _server_connection()
    try:
        with conn.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    finally:
        conn.close()
    url = SERVER_URL.set(drivername="mysql+pymysql", database=name)
    engine = create_engine(url)
    Base.metadata.create_all(engine)
    engine.dispose()
    return SERVER_URL.set(drivername="mysql", database=name)


def drop_database(name: str) -> None:
    conn = _server_connection()
    try:
        with conn.cursor() as cursor:
            # A connection a test leaked (or a killed process left) would block the DROP.
            cursor.execute("SELECT id FROM information_schema.processlist WHERE db = %s", (name,))
            for (connection_id,) in cursor.fetchall():
                with contextlib.suppress(pymysql.err.OperationalError):  # already gone
                    cursor.execute(f"KILL {int(connection_id)}")
            cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
    finally:
        conn.close()


@pytest.fixture
def database_url() -> Iterator[str]:
    """A fresh MariaDB database with the schema, as a plain mysql:// URL."""
    name = f"relay_t_{uuid.uuid4().hex[:12]}"
    url = create_database(name)
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        drop_database(name)


@pytest.fixture(scope="session")
def sqs_server() -> Iterator[localsqs.LocalSqs]:
    server = localsqs.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def unique() -> str:
    return uuid.uuid4().hex[:10]


@pytest.fixture
def infra_env(database_url: str, sqs_server: localsqs.LocalSqs, unique: str) -> dict[str, Any]:
    """Settings values pointing one test at its own database, queues and Redis prefix."""
    return {
        "environment": "test",
        "database_url": database_url,
        "aws_endpoint_url": sqs_server.endpoint,
        "queue_name": f"relay-{unique}",
        "dlq_name": f"relay-{unique}-dlq",
        "redis_url": REDIS_URL,
        "redis_prefix": f"relaytest:{unique}:",
    }


@pytest.fixture
async def sqs(sqs_server: localsqs.LocalSqs) -> AsyncIterator[Any]:
    """A raw SQS client for assertions."""
    async with queue_mod.sqs_client(
        endpoint_url=sqs_server.endpoint,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    ) as client:
        yield client


@pytest.fixture(scope="session")
def stub_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stub]:
    """One relayer-stub process for the session; ``stub`` resets it for each test."""
    server = start_stub(tmp_path_factory.mktemp("stub"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def stub(stub_server: Stub) -> Stub:
    stub_server.reset()
    return stub_server
