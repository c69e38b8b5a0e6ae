"""POST /api/v1/webhooks/oz-relayer: status updates pushed by the executor."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Request

from relay_api.deps import RuntimeDep, UowDep
from relay_api.responses import Json
from relay_api.webhooks import service
from relay_core.statuses import is_terminal
from relay_core.views import status_entry

router = APIRouter(prefix="/api/v1/webhooks", tags=["webhooks"])


@router.post(
    "/oz-relayer",
    responses={
        200: {"description": "applied, duplicate or ignored"},
        401: {"description": "X-Signature missing or wrong"},
        404: {"description": "unknown executor id (the executor retries)"},
    },
)
async def oz_relayer(
    request: Request,
    uow: UowDep,
    runtime: RuntimeDep,
    x_signature: Annotated[str | None, Header(alias="X-Signature")] = None,
) -> Json:
    """Verify the HMAC over the raw body, drop replays by webhook id, apply forward-only."""
    raw = await request.body()
    key = runtime.settings.webhook_signing_key
    service.verify(raw, x_signature, key.get_secret_value() if key else None)
    outcome, tx = await service.apply(uow.session, service.parse(raw))
    cache = runtime.cache
    if tx is not None and cache is not None:
        entry, version, terminal = status_entry(tx), tx.version, is_terminal(tx.status)

        async def write_through() -> None:  # MySQL first, then the cache
            await cache.put_quietly(entry["transactionId"], version, entry, terminal=terminal)

        uow.after_commit.append(write_through)
    return Json({"status": outcome})
