"""relay-api test fixtures: the real app in-process over httpx, on real MariaDB/Redis/SQS."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from api_testkit import TEST_FORWARDER

from relay_api.app import create_app
from relay_api.auth.service import create_client
from relay_api.runtime import Runtime
from relay_api.settings import ApiSettings
from relay_core import policy
from relay_core import queue as queue_mod


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    """Override in a test module to change settings for every test in it."""
    return {}


@pytest.fixture
def api_settings(infra_env: dict[str, Any], settings_overrides: dict[str, Any]) -> ApiSettings:
    values: dict[str, Any] = {
        **infra_env,
        # gasless on, for a forwarder that is not deployed anywhere (the chain is not asked)
        "chain_id": 31337,
        "forwarder_address": TEST_FORWARDER,
        "auth_cache_ttl_s": 0,
        "sweeper_enabled": False,
        "outbox_sweep_grace_s": 0,
        **settings_overrides,
    }
    return ApiSettings(**values)


@pytest.fixture
async def queues(api_settings: ApiSettings, sqs: Any) -> tuple[str, str]:
    return await queue_mod.create_queues(sqs, api_settings)


@pytest.fixture
async def app_runtime(
    api_settings: ApiSettings, queues: tuple[str, str]
) -> AsyncIterator[tuple[httpx.AsyncClient, Runtime]]:
    app = create_app(api_settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://relay.test") as client:
            yield client, app.state.runtime


@pytest.fixture
def client(app_runtime: tuple[httpx.AsyncClient, Runtime]) -> httpx.AsyncClient:
    return app_runtime[0]


@pytest.fixture
def runtime(app_runtime: tuple[httpx.AsyncClient, Runtime]) -> Runtime:
    return app_runtime[1]


NewKey = Callable[..., Awaitable[str]]


@pytest.fixture
def new_key(runtime: Runtime) -> NewKey:
    async def make(
        name: str = "acme", *, admin: bool = False, role: str | None = None, granted: bool = True
    ) -> str:
        """A key of ``role`` (admin with ``admin``); a client's is granted a policy with no
        limits unless ``granted`` is off (then it may submit nothing)."""
        role = role or ("admin" if admin else "client")
        async with runtime.sessions() as session, session.begin():
            client, key = await create_client(session, name, role=role)
            if role == "client" and granted:
                policy.apply(client, {"allowedTo": []}, granted_by="the test")
        return key

    return make


@pytest.fixture
async def api_key(new_key: NewKey) -> str:
    return await new_key()
