"""``/api/v1/health`` (plain ``OK``) and ``/api/v1/ready``; no auth, as upstream."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse

from relayer_stub.deps import RuntimeDep
from relayer_stub.responses import JSONResponse
from relayer_stub.transactions.models import now_rfc3339

router = APIRouter(prefix="/api/v1", tags=["health"])


@router.get("/health", response_class=PlainTextResponse)
async def health() -> PlainTextResponse:
    return PlainTextResponse("OK")


@router.get("/ready")
async def ready(runtime: RuntimeDep) -> JSONResponse:
    ledger_ok = runtime.ledger.alive
    body: dict[str, object] = {
        "ready": ledger_ok,
        "status": "healthy" if ledger_ok else "unhealthy",
        "components": {"ledger": {"status": "healthy" if ledger_ok else "unhealthy"}},
        "timestamp": now_rfc3339(),
    }
    if not ledger_ok:
        body["reason"] = "ledger writer is not running"
    return JSONResponse(body, status_code=200 if ledger_ok else 503)
