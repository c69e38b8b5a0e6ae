"""The operator's dashboard: one page (no external assets) that reads the admin endpoints with
the admin key the operator types in, and a JSON view of recent activity for it."""

from __future__ import annotations

from importlib import resources
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, Field

from relay_api.dashboard import service
from relay_api.deps import CallerDep, UowDep, require_admin
from relay_api.openapi import AUTHENTICATED, errors
from relay_api.responses import Json

router = APIRouter(prefix="/api/v1/admin", tags=["admin"])

_PAGE = resources.files(__package__).joinpath("page.html").read_bytes()


class Minute(BaseModel):
    minute: str = Field(description="the minute, RFC 3339 UTC")
    accepted: int
    finished: int = Field(description="reached a final status in this minute")


class RecentTransaction(BaseModel):
    transaction_id: str = Field(alias="transactionId")
    client: str
    type: str
    status: str
    attempts: int
    error: str | None
    created_at: str | None = Field(alias="createdAt")
    updated_at: str | None = Field(alias="updatedAt")


class Activity(BaseModel):
    oldest_pending_age_s: dict[str, float] = Field(
        alias="oldestPendingAgeS",
        description="per lane with any: the age of its oldest transaction still pending (s)",
    )
    minutes: list[Minute]
    transactions: list[RecentTransaction] = Field(description="the newest, newest first")


@router.get("/dashboard", include_in_schema=False)
async def dashboard() -> HTMLResponse:
    """The page itself holds no data: it asks for the admin key and reads the admin API."""
    return HTMLResponse(
        _PAGE,
        headers={
            "Cache-Control": "no-store",
            # Everything is inline and same-origin; nothing may be loaded from elsewhere.
            "Content-Security-Policy": "default-src 'none'; script-src 'unsafe-inline'; "
            "style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; "
            "frame-ancestors 'none'",
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
        },
    )


@router.get(
    "/activity",
    response_model=Activity,
    responses=errors(*AUTHENTICATED, 422, notes={403: "The key is not an admin key"}),
    operation_id="getActivity",
)
async def activity(
    caller: CallerDep,
    uow: UowDep,
    minutes: Annotated[int, Query(ge=1, le=120)] = 15,
    newest: Annotated[int, Query(ge=0, le=200)] = 20,
) -> Json:
    """Transactions accepted and finished per minute over the last ``minutes``, the age of the
    oldest one still pending, and the ``newest`` transactions with their statuses."""
    require_admin(caller)
    return Json(await service.activity(uow.session, minutes, newest))
