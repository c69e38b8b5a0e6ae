"""The FastAPI application."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from relayer_stub import errors
from relayer_stub.admin.endpoints import router as admin_router
from relayer_stub.health.endpoints import router as health_router
from relayer_stub.middleware import UpstreamEdge
from relayer_stub.responses import JSONResponse
from relayer_stub.runtime import open_runtime
from relayer_stub.settings import StubSettings
from relayer_stub.transactions.endpoints import router as transactions_router
from relayer_stub.transactions.fastpath import SendTransactionRoute


def create_app(settings: StubSettings | None = None) -> FastAPI:
    settings = settings or StubSettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with open_runtime(settings) as runtime:
            app.state.runtime = runtime
            yield

    app = FastAPI(
        title="relayer-stub",
        version="0.1.0",
        summary="OpenZeppelin Relayer v1.x compatible executor for dev and tests.",
        lifespan=lifespan,
        default_response_class=JSONResponse,
        redirect_slashes=False,
    )
    # Added last = outermost: the edge (auth, slashes, request id) runs before the send route.
    app.add_middleware(SendTransactionRoute)
    app.add_middleware(UpstreamEdge, api_key=settings.api_key.get_secret_value())
    errors.install(app)
    app.include_router(health_router)
    app.include_router(transactions_router)
    app.include_router(admin_router)
    return app
