"""POST /api/v1/webhooks/oz-relayer: status updates pushed by the executor."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Request, Security
from pydantic import BaseModel, Field

from relay_api.deps import RuntimeDep, unit_of_work
from relay_api.openapi import WEBHOOK_SIGNATURE, errors
from relay_api.responses import Json
from relay_api.runtime import Runtime
from relay_api.webhooks import service
from relay_core.statuses import is_terminal
from relay_core.views import status_entry

router = APIRouter(prefix="/api/v1/webhooks", tags=["webhooks"])


class WebhookAck(BaseModel):
    status: str = Field(description="applied, duplicate or ignored")


@router.post(
    "/oz-relayer",
    response_model=WebhookAck,
    responses=errors(
        413,
        422,
        503,
        notes={
            400: "The body is not an executor notification",
            401: "X-Signature missing or wrong",
            404: "Unknown executor id (the executor retries)",
        },
    ),
    operation_id="receiveExecutorWebhook",
)
async def oz_relayer(
    request: Request,
    runtime: RuntimeDep,
    x_signature: Annotated[str | None, Security(WEBHOOK_SIGNATURE)] = None,
) -> Json:
    """Verify the HMAC over the raw body, drop replays by webhook id, apply forward-only."""
    return await receive(runtime, await request.body(), x_signature)


async def receive(runtime: Runtime, raw: bytes, signature: str | None) -> Json:
    """The route's work (relay_api.fastpath runs it without FastAPI's request machinery)."""
    key = runtime.settings.webhook_signing_key
    service.verify(raw, signature, key.get_secret_value() if key else None)
    update = service.transaction_update(service.parse(raw))
    if update is None:
        return Json({"status": "ignored"})
    if runtime.webhooks is not None:  # MySQL: batched on driver connections
        return Json({"status": await runtime.webhooks.apply(*update)})
    async with unit_of_work(runtime) as uow:  # SQLite: one at a time
        outcome, tx = await service.apply(uow.session, *update)
        cache = runtime.cache
        if tx is not None and cache is not None:
            entry, version, terminal = status_entry(tx), tx.version, is_terminal(tx.status)

            async def write_through() -> None:  # MySQL first, then the cache
                await cache.put_quietly(entry["transactionId"], version, entry, terminal=terminal)

            uow.after_commit.append(write_through)
    return Json({"status": outcome})
