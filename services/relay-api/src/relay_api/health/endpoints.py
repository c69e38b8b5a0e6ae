"""Liveness, readiness and metrics."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, Field
from sqlalchemy import text

from relay_api.deps import RuntimeDep
from relay_api.responses import Json

router = APIRouter(tags=["health"])


class Liveness(BaseModel):
    status: str


class Readiness(BaseModel):
    status: str = Field(description="ready or unavailable")
    components: dict[str, str] = Field(description='each dependency: "ok" or "down: <why>"')


@router.get("/health", response_model=Liveness, operation_id="health")
async def health() -> dict[str, str]:
    """Liveness: the process answers. Checks nothing else, so a dependency outage never
    gets a healthy process restarted."""
    return {"status": "ok"}


async def _check(name: str, probe: Any, timeout_s: float) -> tuple[str, str]:
    try:
        await asyncio.wait_for(probe, timeout_s)
    except Exception as exc:
        return name, f"down: {type(exc).__name__}"
    return name, "ok"


@router.get(
    "/ready",
    response_model=Readiness,
    responses={503: {"model": Readiness, "description": "A dependency does not answer"}},
    operation_id="ready",
)
async def ready(runtime: RuntimeDep) -> Json:
    """Readiness: the database, SQS and (when configured) Redis all answer."""

    async def database() -> None:
        async with runtime.engine.connect() as connection:
            await connection.execute(text("SELECT 1"))

    probes = [_check("database", database(), 2.0), _check("sqs", runtime.queue.ping(), 2.0)]
    if runtime.redis is not None:
        probes.append(_check("redis", runtime.redis.ping(), 1.0))
    components = dict(await asyncio.gather(*probes))
    ok = all(state == "ok" for state in components.values())
    return Json(
        {"status": "ready" if ok else "unavailable", "components": components},
        status_code=200 if ok else 503,
    )


@router.get("/metrics", include_in_schema=False)
async def metrics() -> PlainTextResponse:
    return PlainTextResponse(generate_latest().decode(), media_type=CONTENT_TYPE_LATEST)
