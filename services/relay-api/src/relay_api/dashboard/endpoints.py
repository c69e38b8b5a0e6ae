"""The operator's dashboard: one page (no external assets) that reads the admin endpoints with
the admin key the operator types in, and a JSON view of recent activity for it."""

from __future__ import annotations

from importlib import resources
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse, Response
from pydantic import BaseModel, Field

from relay_api.dashboard import service
from relay_api.deps import CallerDep, UowDep, require_operator
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


class FlaggedClient(BaseModel):
    id: str
    name: str
    granted_at: str | None = Field(alias="grantedAt")
    granted_by: str | None = Field(alias="grantedBy")


class Activity(BaseModel):
    clients_without_limits: list[FlaggedClient] = Field(
        alias="clientsWithoutLimits",
        description="active clients granted a policy with no limit at all (any destination, "
        "value and gas): each should be given limits",
    )
    oldest_pending_age_s: dict[str, float] = Field(
        alias="oldestPendingAgeS",
        description="per lane with any: the age of its oldest transaction still pending (s)",
    )
    minutes: list[Minute]
    transactions: list[RecentTransaction] = Field(description="the newest, newest first")


_SCRIPT = resources.files(__package__).joinpath("dashboard.js").read_bytes()
# Same-origin code only (the page's script is a file of its own, dashboard.js): an injected
# inline script would not run. Styles stay inline (they carry no code).
_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; connect-src 'self'; "
    "img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)
_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": _POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


@router.get("/dashboard", include_in_schema=False)
async def dashboard() -> HTMLResponse:
    """The page itself holds no data: it asks for an operator's key and reads the admin
    API."""
    return HTMLResponse(_PAGE, headers=_HEADERS)


@router.get("/dashboard.js", include_in_schema=False)
async def dashboard_script() -> Response:
    return Response(_SCRIPT, media_type="text/javascript", headers=_HEADERS)


@router.get(
    "/activity",
    response_model=Activity,
    responses=errors(
        *AUTHENTICATED, 422, notes={403: "The key is neither an operator's nor an admin's"}
    ),
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
    require_operator(caller)
    return Json(await service.activity(uow.session, minutes, newest))
