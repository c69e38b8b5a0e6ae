"""Per-client settings: the callback URL for status notifications."""

from __future__ import annotations

import secrets

from fastapi import APIRouter

from relay_api.clients import repository
from relay_api.deps import CallerDep, JsonBody, RuntimeDep, UowDep
from relay_api.relay.schemas import CallbackRequest, CallbackResponse
from relay_api.responses import Json

router = APIRouter(prefix="/api/v1/clients", tags=["clients"])


@router.put("/me/callback", response_model=CallbackResponse, dependencies=[JsonBody])
async def set_callback(
    body: CallbackRequest, caller: CallerDep, uow: UowDep, runtime: RuntimeDep
) -> Json:
    """Register (or clear, with ``url: null``) where status notifications are POSTed.

    Each notification carries ``Relay-Signature: t=<unix>,v1=<hex HMAC-SHA256 of
    "<t>.<body>">`` made with the client's secret, which is returned only when it is first
    created or when ``rotateSecret`` is true.
    """
    client = await repository.by_id(uow.session, caller.id)
    assert client is not None
    shown = None
    if client.callback_secret is None or body.rotate_secret:
        client.callback_secret = "whsec_" + secrets.token_urlsafe(32)
        shown = client.callback_secret
    client.callback_url = body.url
    await uow.session.flush()
    runtime.authenticator.forget(caller.id)
    return Json({"url": client.callback_url, "secret": shown})
