"""queue-consumer fixtures: a real relayer-stub process, real MariaDB, Redis and SQS."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from consumer_testkit import process_env

from queue_consumer.settings import ConsumerSettings
from relay_core import queue as queue_mod
from relay_core.settings import InfraSettings
from relay_testkit import Stub


@pytest.fixture
def consumer_env(infra_env: dict[str, Any], stub: Stub, tmp_path: Path) -> dict[str, Any]:
    """Settings for a fast test consumer: short visibility, settle and back-off times."""
    return {
        **infra_env,
        "executor_url": stub.base_url,
        "queue_visibility_timeout_s": 4,
        "executor_timeout_s": 1.5,
        # The stub acts on a request as soon as it reads it; 3 s covers a starved machine.
        "executor_handler_timeout_s": 3.0,
        "consumer_wait_time_s": 1,
        "consumer_backoff_base_s": 1.0,
        "consumer_backoff_cap_s": 2.0,
        "consumer_grace_s": 15,
        "consumer_concurrency": 64,
        "database_pool_size": 10,
        "consumer_reaper_interval_s": 1.0,
        "consumer_heartbeat_file": str(tmp_path / "heartbeat"),
    }


@pytest.fixture
def consumer_settings(consumer_env: dict[str, Any]) -> ConsumerSettings:
    return ConsumerSettings(**consumer_env)


@pytest.fixture
async def queues(consumer_settings: ConsumerSettings, sqs: Any) -> tuple[str, str]:
    return await queue_mod.create_queues(sqs, InfraSettings(**consumer_settings.model_dump()))


@pytest.fixture
def spawn_consumer(consumer_env: dict[str, Any], tmp_path: Path) -> Iterator[Any]:
    """Start real consumer processes; all are killed at the end of the test."""
    processes: list[subprocess.Popen[bytes]] = []

    def spawn(
        index: int = 0, extra_env: dict[str, str] | None = None, **overrides: Any
    ) -> subprocess.Popen[bytes]:
        env = process_env(
            {
                **consumer_env,
                "consumer_id": f"test-consumer-{index}",
                "consumer_heartbeat_file": str(tmp_path / f"heartbeat-{index}"),
                **overrides,
            }
        )
        env.update(extra_env or {})
        log = open(tmp_path / f"consumer-{index}.log", "ab")  # noqa: SIM115
        process = subprocess.Popen(
            [sys.executable, "-m", "queue_consumer.main"], env=env, stdout=log, stderr=log
        )
        processes.append(process)
        return process

    yield spawn
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.fixture
async def run_consumer(consumer_settings: ConsumerSettings) -> AsyncIterator[Any]:
    """Run a consumer in this process (as a task); stopped at the end of the test."""
    import asyncio

    from queue_consumer.main import open_consumer

    started: list[tuple[asyncio.Task[Any], asyncio.Event]] = []

    async def start(**overrides: Any) -> Any:
        settings = consumer_settings.model_copy(update=overrides)
        stop = asyncio.Event()
        ready: asyncio.Queue[Any] = asyncio.Queue()

        async def main() -> dict[str, Any]:
            async with open_consumer(settings, stop) as consumer:
                await ready.put(consumer)
                return await consumer.run()

        task = asyncio.create_task(main())
        started.append((task, stop))
        return await asyncio.wait_for(ready.get(), 30)

    yield start
    for task, stop in started:
        stop.set()
        await asyncio.wait_for(task, 60)
