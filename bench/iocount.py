"""Count a process's calls to SQS, Redis and the executor from outside the application
(benchmark launchers only), next to bench.dbcount's database round trips.

- SQS: every aiobotocore API call by operation, and the messages ReceiveMessage returned;
- Redis: every command redis-py sends (a Lua script call is one EVALSHA);
- executor: every HTTP request httpx sends, by method and route.
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

    async def counted_api_call(self: Any, operation_name: str, api_params: Any) -> Any:
        SQS[operation_name] += 1
        response = await make_api_call(self, operation_name, api_params)
        if operation_name == "ReceiveMessage":
            received = len(response.get("Messages", []))
            SQS["ReceiveMessage.messages"] += received
            if not received:
                SQS["ReceiveMessage.empty"] += 1
        return response

    counted_api_call._bench_counted = True  # type: ignore[attr-defined]
    AioBaseClient._make_api_call = counted_api_call

    from redis.asyncio.client import Redis

    execute_command = Redis.execute_command

    async def counted_execute_command(self: Any, *args: Any, **options: Any) -> Any:
        REDIS[str(args[0]).upper() if args else "?"] += 1
        return await execute_command(self, *args, **options)

    Redis.execute_command = counted_execute_command  # type: ignore[method-assign]

    import httpx

    send = httpx.AsyncClient.send

    async def counted_send(self: Any, request: httpx.Request, **kwargs: Any) -> Any:
        HTTP[f"{request.method} {_ID.sub('/{id}', request.url.path)}"] += 1
        return await send(self, request, **kwargs)

    httpx.AsyncClient.send = counted_send  # type: ignore[method-assign]


def snapshot() -> dict[str, dict[str, int]]:
    return {"sqs": dict(SQS), "redis": dict(REDIS), "executor_http": dict(HTTP)}
