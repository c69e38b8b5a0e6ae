"""``/api/v1/relayers/{relayer_id}/...``: the OZ Relayer v1.x subset, Bearer auth."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from relayer_stub.deps import runtime_of
from relayer_stub.responses import JSONResponse

# Bearer auth is checked by relayer_stub.middleware.UpstreamEdge for every /api path. The send
# (POST .../transactions) is served by relayer_stub.transactions.fastpath, in front of FastAPI.
router = APIRouter(prefix="/api/v1", tags=["relayer"])


def success(data: Any, **extra: Any) -> JSONResponse:
    return JSONResponse({"success": True, "data": data, "error": None, **extra})


@router.get("/relayers/{relayer_id}/transactions")
async def list_transactions(
    relayer_id: str,
    request: Request,
    page: Annotated[int, Query(ge=1)] = 1,
    per_page: Annotated[int, Query(ge=1)] = 10,
    status: str | None = None,
) -> JSONResponse:
    """Newest first by created_at; ``status`` is case-insensitive."""
    runtime = runtime_of(request)
    await runtime.faults.before_request(submit=False)
    items, total = runtime.transactions.list(relayer_id, page, per_page, status)
    return success(
        items, pagination={"current_page": page, "per_page": per_page, "total_items": total}
    )


@router.get("/relayers/{relayer_id}/transactions/{transaction_id}")
async def get_transaction(relayer_id: str, transaction_id: str, request: Request) -> JSONResponse:
    runtime = runtime_of(request)
    await runtime.faults.before_request(submit=False)
    return success(runtime.transactions.get(relayer_id, transaction_id))


@router.delete("/relayers/{relayer_id}/transactions/{transaction_id}")
async def cancel_transaction(
    relayer_id: str, transaction_id: str, request: Request
) -> JSONResponse:
    """pending: canceled at once. sent/submitted: replaced by a no-op, ``is_canceled`` true,
    ends ``canceled`` when the no-op confirms. Any other status: 400."""
    runtime = runtime_of(request)
    await runtime.faults.before_request(submit=False)
    return success(runtime.transactions.cancel(relayer_id, transaction_id))


@router.put("/relayers/{relayer_id}/transactions/{transaction_id}")
async def replace_transaction(
    relayer_id: str, transaction_id: str, request: Request
) -> JSONResponse:
    """The same transaction (its id, its nonce) with the body's terms, priced again from its
    speed; pending, sent or submitted only. The body is a send's, with a send's 400s."""
    runtime = runtime_of(request)
    await runtime.faults.before_request(submit=False)
    body = await request.body()
    return success(await runtime.transactions.replace(relayer_id, transaction_id, body))


@router.get("/relayers/{relayer_id}/status")
async def relayer_status(relayer_id: str, request: Request) -> JSONResponse:
    runtime = runtime_of(request)
    await runtime.faults.before_request(submit=False)
    return success(await runtime.transactions.relayer_status(relayer_id))


@router.get("/relayers/{relayer_id}/balance")
async def relayer_balance(relayer_id: str, request: Request) -> JSONResponse:
    """``{"balance": <wei, a JSON integer>, "unit": "wei"}``, as upstream's BalanceResponse."""
    runtime = runtime_of(request)
    await runtime.faults.before_request(submit=False)
    balance = await runtime.transactions.balance(relayer_id)
    return success({"balance": balance, "unit": "wei"})
