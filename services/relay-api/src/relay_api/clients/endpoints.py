"""Per-client settings: a client's own callback URL; any client's limits, for operators."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from relay_api.clients import repository, service
from relay_api.clients.schemas import ClientChanges, ClientView
from relay_api.deps import (
    CallerDep,
    JsonBody,
    RuntimeDep,
    UowDep,
    require_admin,
    require_operator,
)
from relay_api.openapi import AUTHENTICATED, WITH_BODY, errors
from relay_api.relay.requests import check_callback_url
from relay_api.relay.schemas import CallbackRequest, CallbackResponse
from relay_api.responses import Json
from relay_core import apikeys

router = APIRouter(prefix="/api/v1/clients", tags=["clients"])


@router.put(
    "/me/callback",
    response_model=CallbackResponse,
    responses=errors(*AUTHENTICATED, *WITH_BODY, notes={400: "A URL Relay will not call"}),
    dependencies=[JsonBody],
    operation_id="setCallback",
)
async def set_callback(
    body: CallbackRequest, caller: CallerDep, uow: UowDep, runtime: RuntimeDep
) -> Json:
    """Register (or clear, with ``url: null``) where status notifications are POSTed.

    Notifications follow Standard Webhooks: ``webhook-id``, ``webhook-timestamp`` and
    ``webhook-signature: v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">`` made with the
    client's secret (``whsec_…``, shown by ``relay keys create``), so any Standard Webhooks
    library verifies them. ``rotateSecret: true`` makes a new secret and returns it, once.
    """
    url = check_callback_url("url", body.url, runtime.settings)
    client = await repository.by_id(uow.session, caller.id)
    assert client is not None
    shown = None
    if client.callback_secret is None or body.rotate_secret:
        client.callback_secret = apikeys.generate_callback_secret()
        shown = client.callback_secret
    client.callback_url = url
    await uow.session.flush()
    runtime.authenticator.forget(caller.id)
    return Json({"url": client.callback_url, "secret": shown})


# --- any client's settings: read by operators, changed by admins ----------------------------

admin_router = APIRouter(prefix="/api/v1/admin/clients", tags=["admin"])

ClientRef = Annotated[
    str, Path(alias="client", min_length=1, max_length=100, description="client id, or its name")
]
ADMIN_NOTES = {
    403: "The key is not an admin key",
    404: "No client with this id, or more than one with this name",
}
OPERATOR_NOTES = {**ADMIN_NOTES, 403: "The key is neither an operator's nor an admin's"}


@admin_router.get(
    "/{client}",
    response_model=ClientView,
    responses=errors(*AUTHENTICATED, 422, notes=OPERATOR_NOTES),
    operation_id="getClient",
)
async def show_client(ref: ClientRef, caller: CallerDep, uow: UowDep, runtime: RuntimeDep) -> Json:
    """A client's settings: rate limit, spend policy (whether one was granted, and whether it
    has no limits at all) and what it has spent in the last 24 hours (what ``relay clients
    show`` prints). Operator and admin keys."""
    require_operator(caller)
    client = await service.find(uow.session, ref)
    return Json(await service.view(uow.session, client, runtime.settings))


@admin_router.patch(
    "/{client}",
    response_model=ClientView,
    responses=errors(
        *AUTHENTICATED, *WITH_BODY, notes={**ADMIN_NOTES, 400: "A setting out of range, naming it"}
    ),
    dependencies=[JsonBody],
    operation_id="changeClient",
)
async def change_client(
    ref: ClientRef, body: ClientChanges, caller: CallerDep, uow: UowDep, runtime: RuntimeDep
) -> Json:
    """Change a client's rate limit or spend policy (what ``relay clients policy`` does). Only
    the fields sent change; ``null`` clears a limit (``rateLimitPerS`` and ``rateLimitBurst``
    together: back to the default); ``allowedTo: []`` allows any destination. Any policy
    field grants the client its policy if it had none (until then it may submit nothing).
    This replica applies it at once, the others within the key cache time
    (``RELAY_AUTH_CACHE_TTL_S``), the consumers within five seconds. Admin keys only; the
    change is in the audit log with who made it."""
    require_admin(caller)
    client = await service.find(uow.session, ref)
    changes = body.model_dump(by_alias=True, exclude_unset=True)
    service.change(uow.session, client, changes, runtime.settings, caller.actor())
    await uow.session.flush()
    runtime.authenticator.forget(client.id)
    return Json(await service.view(uow.session, client, runtime.settings))
