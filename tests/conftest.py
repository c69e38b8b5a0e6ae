"""A real chain under the whole system, for the chain tests (tests/chain) and the client's
(tests/client): anvil with the forwarder and the recipient deployed, the relayer-stub in chain
mode (signing and broadcasting with the dev relayer key), and, for each test, the API and a
consumer as processes on the test's own database, queues and Redis prefix. Each fixture
starts only when a test asks for it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from relay_core import evm
from relay_core import queue as queue_mod
from relay_core.settings import InfraSettings
from relay_devstack import localchain
from relay_devstack.localsqs import free_port
from relay_testkit import (
    Stub,
    infra_process_env,
    new_api_key,
    start_stub,
    stop_processes,
    wait_http,
)


@dataclass
class ChainStack:
    chain: localchain.LocalChain
    deployment: localchain.Deployment
    stub: Stub
    api_url: str
    api_key: str
    database_url: str
    env: dict[str, str]  # the processes' environment (for `relay` commands)

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.api_url, headers={"X-API-Key": self.api_key}, timeout=10
        )

    def rpc(self) -> evm.EvmRpc:
        return evm.EvmRpc(self.chain.rpc_url)


@pytest.fixture(scope="module")
def anvil(tmp_path_factory: pytest.TempPathFactory) -> Iterator[localchain.LocalChain]:
    chain = localchain.start(log_path=tmp_path_factory.mktemp("anvil") / "anvil.log")
    try:
        yield chain
    finally:
        chain.stop()


@pytest.fixture(scope="module")
async def deployment(anvil: localchain.LocalChain) -> localchain.Deployment:
    return await localchain.deploy(anvil.rpc_url)


@pytest.fixture(scope="module")
def chain_stub(
    anvil: localchain.LocalChain, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stub]:
    stub = start_stub(
        tmp_path_factory.mktemp("chain-stub"),
        STUB_CHAIN_RPC_URL=anvil.rpc_url,
        STUB_CHAIN_POLL_INTERVAL_S="0.05",
    )
    try:
        yield stub
    finally:
        stub.stop()


@pytest.fixture
async def stack(
    anvil: localchain.LocalChain,
    deployment: localchain.Deployment,
    chain_stub: Stub,
    infra_env: dict[str, Any],
    sqs: Any,
    tmp_path: Path,
) -> AsyncIterator[ChainStack]:
    chain_stub.reset()
    chain_stub.lifecycle(paused=False)  # reset pauses the stub; on a chain it must send
    api_port = free_port()
    api_url = f"http://127.0.0.1:{api_port}"
    # Statuses as shipped: no executor webhooks, the consumer's follower and tracker at their
    # defaults (make run, docker-compose and infra/ configure none).
    chain_stub.webhook(None, None)
    await queue_mod.create_queues(sqs, InfraSettings(**infra_env))
    env = infra_process_env(
        infra_env,
        RELAY_EXECUTOR_URL=chain_stub.base_url,
        RELAY_CHAIN_RPC_URL=anvil.rpc_url,
        RELAY_CHAIN_ID=str(deployment.chain_id),
        RELAY_FORWARDER_ADDRESS=deployment.forwarder,
        RELAY_CONSUMER_NONCE_POLL_S="0.3",
        RELAY_CONSUMER_WAIT_TIME_S="1",
        RELAY_CONSUMER_HEARTBEAT_FILE=str(tmp_path / "heartbeat"),
        # a test's callback receiver listens on 127.0.0.1, allowed here on purpose
        RELAY_CALLBACK_ALLOW_LOOPBACK="true",
        PORT=str(api_port),
    )
    # twenty transactions polled five times a second each: above the default rate limit
    key = new_api_key(env, "chain", rate_per_s=1000, burst=2000)
    processes: list[subprocess.Popen[bytes]] = []
    with open(tmp_path / "services.log", "ab") as log:
        try:
            for command in (["relay_api.cli", "serve"], ["queue_consumer.main"]):
                processes.append(
                    subprocess.Popen(
                        [sys.executable, "-m", *command], env=env, stdout=log, stderr=log
                    )
                )
            wait_http(f"{api_url}/health", processes[0])
            yield ChainStack(
                anvil, deployment, chain_stub, api_url, key, infra_env["database_url"], env
            )
        finally:
            stop_processes(processes)
