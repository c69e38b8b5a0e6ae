"""Each package installs what it imports and nothing else (DEVELOPERS.md#dependencies), read
from the lock with `uv tree`: the relayer-stub and the pipeline carry no database driver stack,
Redis or SQS client they never import, the client library is httpx alone, and nothing that
ships installs the test helpers."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UV = os.environ.get("UV") or shutil.which("uv") or str(Path.home() / ".local" / "bin" / "uv")


def _installs(package: str, *, extras: bool = True) -> set[str]:
    """Every distribution ``package`` installs (its extras too unless ``extras`` is off)."""
    command = [UV, "tree", "--locked", "--no-dev", "--package", package]
    tree = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    ).stdout
    found = set()
    skipping_below: int | None = None  # the depth of an extra's line whose subtree is skipped
    for line in tree.splitlines()[1:]:
        entry = re.sub(r"^[\s│├└─]*", "", line)
        depth = (len(line) - len(entry)) // 4
        if skipping_below is not None and depth > skipping_below:
            continue
        skipping_below = None
        if not extras and "(extra:" in entry:
            skipping_below = depth
            continue
        name = entry.split(" ")[0]
        if name and not name.startswith("("):
            found.add(name.split("[")[0])
    return found


@pytest.fixture(scope="module", autouse=True)
def _uv() -> None:
    if not Path(UV).exists():
        pytest.fail(f"uv not found at {UV} (make install puts it there)")


def test_the_relayer_stub_installs_no_database_cache_or_sqs_client() -> None:
    installed = _installs("relayer-stub")
    assert not installed & {"sqlalchemy", "greenlet", "alembic", "asyncmy", "aiosqlite"}
    assert not installed & {"redis", "aiobotocore", "botocore", "relay-testkit"}
    assert "eth-account" in installed  # chain mode signs and sends: it imports it


def test_the_pipeline_installs_neither_the_async_database_stack_nor_eth_account() -> None:
    installed = _installs("relay-pipeline")
    assert not installed & {"greenlet", "asyncmy", "aiosqlite", "alembic"}
    assert not installed & {"eth-account", "redis", "aiobotocore", "aiohttp", "relay-testkit"}
    assert {"pyspark", "sqlalchemy", "pymysql"} <= installed


def test_the_client_library_is_httpx_alone_and_eth_account_only_for_gasless() -> None:
    plain = _installs("relay-client", extras=False)
    assert "httpx" in plain
    assert not plain & {"relay-core", "eth-account", "pydantic", "aiohttp"}
    assert "eth-account" in _installs("relay-client")


def test_the_consumer_speaks_http_through_its_own_client_and_sqs_through_aiobotocore() -> None:
    installed = _installs("queue-consumer")
    assert "httptools" in installed  # relay_wire.http: the executor, SQS's hot calls
    assert "aiohttp" in installed  # callbacks to clients, the chain's JSON-RPC
    assert "aiobotocore" in installed
    assert not installed & {"httpx", "aioboto3", "relay-testkit"}


def test_no_service_installs_the_test_helpers() -> None:
    for package in ("relay-api", "queue-consumer", "relayer-stub", "relay-pipeline"):
        assert "relay-testkit" not in _installs(package), package


def test_the_development_stack_is_in_no_service_image_but_the_stubs() -> None:
    """relay-devstack (the local SQS server, the dev chain) is for make run and the tests; the
    relayer-stub, itself a development executor, signs with the dev chain's accounts."""
    for package in ("relay-api", "queue-consumer", "relay-pipeline"):
        assert "relay-devstack" not in _installs(package), package
    assert "relay-devstack" in _installs("relayer-stub")


def test_the_wire_clients_go_only_where_they_are_used() -> None:
    for package in ("relay-api", "queue-consumer"):
        assert "relay-wire" in _installs(package), package
    for package in ("relay-pipeline", "relayer-stub"):
        assert "relay-wire" not in _installs(package), package
