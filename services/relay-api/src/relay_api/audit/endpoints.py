"""``GET /api/v1/admin/audit``: what admins and operators did, for admin and operator keys."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from relay_api.audit.schemas import AuditPage
from relay_api.deps import CallerDep, UowDep, require_operator
from relay_api.openapi import AUTHENTICATED, errors
from relay_api.responses import Json
from relay_core import audit
from relay_core.errors import BadRequest

router = APIRouter(prefix="/api/v1/admin/audit", tags=["admin"])


@router.get(
    "",
    response_model=AuditPage,
    responses=errors(
        *AUTHENTICATED,
        422,
        notes={
            403: "The key is neither an operator's nor an admin's",
            400: "cursor: not one this API returned",
        },
    ),
    operation_id="getAuditLog",
)
async def audit_log(
    caller: CallerDep,
    uow: UowDep,
    limit: Annotated[int, Query(ge=1, le=500, description="most entries")] = 50,
    cursor: Annotated[str | None, Query(max_length=32, description="nextCursor")] = None,
) -> Json:
    """Every change an admin or operator made (policies, keys, the lanes' switch, redrives,
    purges), newest first, with who made it, when, and the target before and after (what
    ``relay audit`` prints)."""
    require_operator(caller)
    before_id = None
    if cursor is not None:
        if not cursor.isdigit():
            raise BadRequest("cursor: not one this API returned")
        before_id = int(cursor)
    entries = await audit.newest(uow.session, limit=limit, before_id=before_id)
    next_cursor = str(entries[-1].id) if len(entries) == limit else None
    return Json({"entries": [audit.view(e) for e in entries], "nextCursor": next_cursor})
