"""Per-client settings: the callback URL for status notifications."""

from __future__ import annotations

from fastapi import APIRouter

from relay_api.clients import repository
from relay_api.deps import CallerDep, JsonBody, RuntimeDep, UowDep
from relay_api.relay.schemas import CallbackRequest, CallbackResponse
from relay_api.relay.service import check_callback_url
from relay_api.responses import Json
from relay_core import apikeys

router = APIRouter(prefix="/api/v1/clients", tags=["clients"])


@router.put("/me/callback", response_model=CallbackResponse, dependencies=[JsonBody])
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
