"""The FastAPI application."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from relay_api import errors, openapi
from relay_api.audit.endpoints import router as audit_router
from relay_api.clients.endpoints import admin_router as clients_admin_router
from relay_api.clients.endpoints import router as clients_router
from relay_api.dashboard.endpoints import router as dashboard_router
from relay_api.fastpath import FastPath
from relay_api.health.endpoints import router as health_router
from relay_api.middleware import BodySizeLimit, Observe
from relay_api.queues.endpoints import dlq_router
from relay_api.queues.endpoints import router as queues_router
from relay_api.relay.endpoints import router as relay_router
from relay_api.relayers.endpoints import router as relayers_router
from relay_api.responses import Json
from relay_api.runtime import open_runtime
from relay_api.settings import ApiSettings
from relay_api.webhooks.endpoints import router as webhooks_router
from relay_core import gctuning, tracing


def create_app(settings: ApiSettings | None = None, *, background: bool = True) -> FastAPI:
    settings = settings or ApiSettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        exporting = tracing.configure_export("relay-api")
        try:
            async with open_runtime(settings, background=background) as runtime:
                app.state.runtime = runtime
                gctuning.freeze_after_startup()
                yield
        finally:
            if exporting:
                tracing.shutdown_export()

    app = FastAPI(
        title="Relay API",
        version="0.1.0",
        summary="Asynchronous EVM transaction relay: submit, get 202, track to confirmation.",
        lifespan=lifespan,
        default_response_class=Json,
        # Relay traces and counts its requests itself (relay_core.tracing, relay_api.metrics);
        # FastAPI's own OpenTelemetry hooks would add a second span per request once OTLP
        # export is on, and look the global providers up on every request even while off.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    # innermost: a well-formed submission or status read skips FastAPI's machinery
    app.add_middleware(FastPath, fastapi=app)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(Observe)  # outermost: a refused body still gets its id and its count
    errors.install(app)
    openapi.install(app)
    app.include_router(health_router)
    app.include_router(relay_router)
    app.include_router(webhooks_router)
    app.include_router(clients_router)
    app.include_router(clients_admin_router)
    app.include_router(queues_router)
    app.include_router(relayers_router)
    app.include_router(dlq_router)
    app.include_router(dashboard_router)
    app.include_router(audit_router)
    return app
