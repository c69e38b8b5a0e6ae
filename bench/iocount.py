"""Count a process's calls to SQS, Redis and the executor from outside the application
(benchmark launchers only), next to bench.dbcount's database round trips.

- SQS: every API call by operation, through aiobotocore or relay_wire.sqswire alike, and the
  messages ReceiveMessage returned;
- Redis: every command redis-py or relay_wire.resp sends (a Lua script call is one EVALSHA);
  a pipeline is one round trip (`PIPELINE`), its commands counted apart (`PIPELINE.commands`);
- executor: every HTTP request to the executor's API (relay_wire.http), by method and route.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

SQS: Counter[str] = Counter()
REDIS: Counter[str] = Counter()
HTTP: Counter[str] = Counter()

_ID = re.compile(r"/[0-9a-f-]{16,}")


def install() -> None:
    from aiobotocore.client import AioBaseClient

    make_api_call = AioBaseClient._make_api_call
    if getattr(make_api_call, "_bench_counted", False):
        return

    def count(operation_name: str, response: Any) -> Any:
        """What a ReceiveMessage returned (the call itself is counted before it is made)."""
        if operation_name == "ReceiveMessage":
            received = len(response.get("Messages", []))
            SQS["ReceiveMessage.messages"] += received
            if not received:
                SQS["ReceiveMessage.empty"] += 1
        return response

    async def counted_api_call(self: Any, operation_name: str, api_params: Any) -> Any:
        SQS[operation_name] += 1
        return count(operation_name, await make_api_call(self, operation_name, api_params))

    counted_api_call._bench_counted = True  # type: ignore[attr-defined]
    AioBaseClient._make_api_call = counted_api_call

    from relay_wire.sqswire import SqsWire

    wire_call = SqsWire._call

    async def counted_wire_call(self: Any, action: str, payload: Any) -> Any:
        SQS[action] += 1
        return count(action, await wire_call(self, action, payload))

    SqsWire._call = counted_wire_call  # type: ignore[method-assign]

    from redis.asyncio.client import Redis

    execute_command = Redis.execute_command

    async def counted_execute_command(self: Any, *args: Any, **options: Any) -> Any:
        REDIS[str(args[0]).upper() if args else "?"] += 1
        return await execute_command(self, *args, **options)

    Redis.execute_command = counted_execute_command  # type: ignore[method-assign]

    from relay_wire.resp import RespClient

    resp_execute = RespClient.execute

    async def counted_resp(self: Any, *args: Any) -> Any:
        REDIS[str(args[0]).upper() if args else "?"] += 1  # the status cache's own client
        return await resp_execute(self, *args)

    RespClient.execute = counted_resp  # type: ignore[method-assign]

    from redis.asyncio.client import Pipeline

    pipeline_execute = Pipeline.execute
    immediate = Pipeline.immediate_execute_command

    async def counted_pipeline_execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        # One round trip however many commands it carries; the commands counted apart.
        REDIS["PIPELINE"] += 1
        REDIS["PIPELINE.commands"] += len(self.command_stack)
        return await pipeline_execute(self, *args, **kwargs)

    async def counted_immediate(self: Any, *args: Any, **options: Any) -> Any:
        REDIS[str(args[0]).upper() if args else "?"] += 1  # SCRIPT EXISTS before a pipeline
        return await immediate(self, *args, **options)

    Pipeline.execute = counted_pipeline_execute  # type: ignore[method-assign]
    Pipeline.immediate_execute_command = counted_immediate  # type: ignore[method-assign]

    from relay_wire.http import HttpClient

    request = HttpClient.request

    def counted_request(self: Any, method: str, target: str, **kwargs: Any) -> Any:
        if "/api/v1/relayers/" in target:  # SQS's wire calls go through HttpClient too
            route = _ID.sub("/{id}", target.split("/api/v1/relayers/", 1)[1].split("?")[0])
            HTTP[f"{method} /api/v1/relayers/{route}"] += 1
        return request(self, method, target, **kwargs)

    HttpClient.request = counted_request  # type: ignore[method-assign]


def snapshot() -> dict[str, dict[str, int]]:
    return {"sqs": dict(SQS), "redis": dict(REDIS), "executor_http": dict(HTTP)}
