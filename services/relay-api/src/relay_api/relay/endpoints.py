"""Routes under /api/v1/relay."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Header, Path, Query

from relay_api.deps import CallerDep, JsonBody, RuntimeDep, UowDep, unit_of_work
from relay_api.relay import service
from relay_api.relay.schemas import (
    AcceptedResponse,
    DirectRequest,
    GaslessRequest,
    StatusResponse,
    TransactionPage,
)
from relay_api.responses import Json
from relay_core.statuses import TxStatus

router = APIRouter(prefix="/api/v1/relay", tags=["relay"])

IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        description="Same key and body within a client → the original 202 again",
    ),
]

ERRORS = {
    400: {"description": "Semantic error naming the field (signature, deadline, gas...)"},
    401: {"description": "Missing, unknown or revoked X-API-Key"},
    409: {"description": "Idempotency-Key reused with another body, or nonce in flight"},
    413: {"description": "Body larger than the configured limit"},
    415: {"description": "Content-Type is not application/json"},
    422: {"description": "Schema error naming the field"},
    503: {"description": "Database unavailable; nothing was written"},
}


def _accepted(result: service.Accepted) -> Json:
    headers = {"Location": f"/api/v1/relay/status/{result.transaction_id}"}
    if result.replayed:
        headers["Idempotent-Replayed"] = "true"
    return Json(result.body(), status_code=202, headers=headers)


@router.post(
    "/direct",
    status_code=202,
    response_model=AcceptedResponse,
    responses=ERRORS,  # type: ignore[arg-type]
    dependencies=[JsonBody],
)
async def submit_direct(
    body: DirectRequest,
    caller: CallerDep,
    runtime: RuntimeDep,
    idempotency_key: IdempotencyKey = None,
) -> Json:
    """Accept a transaction to send as is. Answers 202 once the request is durable."""
    key = service.check_idempotency_key(idempotency_key)
    new = service.prepare_direct(body, runtime.settings)
    async with unit_of_work(runtime) as uow:
        accepted = await service.accept(uow.session, caller, new, key, uow.outbox)
    return _accepted(accepted)


@router.post(
    "/gasless",
    status_code=202,
    response_model=AcceptedResponse,
    responses=ERRORS,  # type: ignore[arg-type]
    dependencies=[JsonBody],
)
async def submit_gasless(
    body: GaslessRequest,
    caller: CallerDep,
    runtime: RuntimeDep,
    idempotency_key: IdempotencyKey = None,
) -> Json:
    """Accept an EIP-712 signed ERC-2771 ForwardRequest; it is executed through the forwarder,
    in nonce order per signer. Sign for the domain of ``GET /relay/gasless/domain`` with the
    nonce of ``GET /relay/gasless/nonce/{address}`` (then the next ones)."""
    key = service.check_idempotency_key(idempotency_key)
    new = service.prepare_gasless(body, runtime.settings)
    await service.check_nonce_unused(runtime.rpc, service.gasless_domain(runtime.settings), new)
    async with unit_of_work(runtime) as uow:
        accepted = await service.accept(uow.session, caller, new, key, uow.outbox)
    return _accepted(accepted)


@router.get("/gasless/domain", responses={401: ERRORS[401], 404: {"description": "Gasless off"}})
async def gasless_domain(caller: CallerDep, runtime: RuntimeDep) -> Json:
    """The EIP-712 domain and types a gasless request must be signed for."""
    return Json(service.domain_view(service.gasless_domain(runtime.settings)))


@router.get(
    "/gasless/nonce/{address}",
    responses={
        401: ERRORS[401],
        404: {"description": "Gasless off"},
        503: {"description": "No chain RPC configured, or it did not answer"},
    },
)
async def gasless_nonce(
    address: Annotated[str, Path(pattern=r"^0x[0-9a-fA-F]{40}$")],
    caller: CallerDep,
    runtime: RuntimeDep,
) -> Json:
    """The nonce the forwarder expects next from ``address``, read from the chain."""
    domain = service.gasless_domain(runtime.settings)
    checked = service.check_address_param(address)
    nonce = await service.forwarder_nonce(runtime.rpc, domain, checked)
    return Json({"address": checked, "nonce": str(nonce)})


@router.get(
    "/status/{transactionId}",
    response_model=StatusResponse,
    responses={401: ERRORS[401], 404: {"description": "Unknown id, or another client's"}},
)
async def get_status(
    transaction_id: Annotated[uuid.UUID, Path(alias="transactionId")],
    caller: CallerDep,
    runtime: RuntimeDep,
) -> Json:
    """Status from Redis, else MySQL (which backfills Redis), refreshed from the executor when
    it is not final and not fresh. ``X-Cache`` names the tier: hit, miss or upstream."""
    async with unit_of_work(runtime) as uow:
        entry = await service.cached_status(runtime.cache, caller, str(transaction_id))
        tier = "hit"
        if entry is None:  # the unit of work opens its session only now
            entry, tier = await service.status(
                uow.session, runtime.cache, runtime.refresher, caller, str(transaction_id)
            )
    return Json(service.public(entry), headers={"X-Cache": tier})


@router.get("/transactions", response_model=TransactionPage, responses={401: ERRORS[401]})
async def list_transactions(
    caller: CallerDep,
    uow: UowDep,
    status: TxStatus | None = None,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> Json:
    """The caller's own transactions, newest first. Pass ``nextCursor`` back as ``cursor``."""
    items, next_cursor = await service.list_transactions(uow.session, caller, status, cursor, limit)
    return Json({"items": items, "nextCursor": next_cursor})
