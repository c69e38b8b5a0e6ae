"""``/__admin``: test control. Open by default (the stub binds loopback); when
``STUB_ADMIN_TOKEN`` is set, every call needs ``Authorization: Bearer <admin token>``."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Body, Depends, Query
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from relayer_stub.deps import RuntimeDep, require_admin
from relayer_stub.faults.schemas import FaultConfig
from relayer_stub.ledger.schemas import LedgerQuery
from relayer_stub.lifecycle.schemas import LifecycleConfig
from relayer_stub.responses import JSONResponse
from relayer_stub.runtime import Runtime
from relayer_stub.transactions.schemas import normalize_data
from relayer_stub.webhooks.schemas import WebhookConfig

M = TypeVar("M", FaultConfig, LifecycleConfig)

router = APIRouter(prefix="/__admin", dependencies=[Depends(require_admin)], tags=["admin"])


@router.get("/ledger")
async def ledger(
    runtime: RuntimeDep,
    to: str | None = None,
    data: str | None = None,
    relayer_id: str | None = None,
    status: str | None = None,
    limit: Annotated[int, Query(ge=0, le=100_000)] = 1000,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> JSONResponse:
    """Every accepted send, oldest first; ``count`` is the number matching the filters."""
    runtime.lifecycle.flush()  # so each entry's status is the live one
    count, entries = await runtime.ledger.query(
        LedgerQuery(
            to=to,
            data=normalize_data(data) if data is not None else None,
            relayer_id=relayer_id,
            status=status,
            limit=limit,
            offset=offset,
        )
    )
    return JSONResponse({"count": count, "entries": entries})


@router.post("/reset")
async def reset(runtime: RuntimeDep) -> JSONResponse:
    await runtime.reset()
    return JSONResponse({"reset": True})


def _faults(runtime: Runtime) -> JSONResponse:
    return JSONResponse(
        {
            "config": runtime.faults.config.model_dump(mode="json"),
            "injected": dict(runtime.faults.injected),
            "hanging": runtime.transactions.hanging,
        }
    )


@router.get("/faults")
async def get_faults(runtime: RuntimeDep) -> JSONResponse:
    return _faults(runtime)


@router.put("/faults")
async def put_faults(runtime: RuntimeDep, config: FaultConfig) -> JSONResponse:
    """Replace the fault configuration (omitted fields take their defaults: ``{}`` clears)."""
    runtime.faults.configure(_known_relayers(runtime, config))
    return _faults(runtime)


@router.patch("/faults")
async def patch_faults(
    runtime: RuntimeDep, patch: Annotated[dict[str, Any], Body()]
) -> JSONResponse:
    config = _validated(FaultConfig, runtime.faults.config.model_dump(), patch)
    runtime.faults.configure(_known_relayers(runtime, config))
    return _faults(runtime)


def _known_relayers(runtime: Runtime, config: FaultConfig) -> FaultConfig:
    """``jam_relayers`` and ``relayer_balances`` may only name the stub's relayers."""
    unknown = config.unknown_relayers(runtime.transactions.relayers)
    if unknown:
        raise RequestValidationError(
            [
                {
                    "loc": ("body", "relayer"),
                    "msg": f"unknown relayer id(s) {unknown}; this stub serves "
                    f"{list(runtime.transactions.relayers)}",
                    "type": "value_error",
                }
            ]
        )
    return config


def _lifecycle(runtime: Runtime) -> JSONResponse:
    return JSONResponse(
        {
            "config": runtime.lifecycle.config.model_dump(mode="json"),
            "stats": runtime.lifecycle.stats(),
        }
    )


@router.get("/lifecycle")
async def get_lifecycle(runtime: RuntimeDep) -> JSONResponse:
    return _lifecycle(runtime)


@router.put("/lifecycle")
async def put_lifecycle(runtime: RuntimeDep, config: LifecycleConfig) -> JSONResponse:
    runtime.lifecycle.configure(config)
    return _lifecycle(runtime)


@router.patch("/lifecycle")
async def patch_lifecycle(
    runtime: RuntimeDep, patch: Annotated[dict[str, Any], Body()]
) -> JSONResponse:
    runtime.lifecycle.configure(
        _validated(LifecycleConfig, runtime.lifecycle.config.model_dump(), patch)
    )
    return _lifecycle(runtime)


def _webhook(runtime: Runtime) -> JSONResponse:
    config = runtime.webhooks.config
    return JSONResponse(
        {
            "config": {"url": config.url, "signing_key_set": config.signing_key is not None},
            "stats": dict(runtime.webhooks.stats) | {"pending": runtime.webhooks.pending},
        }
    )


@router.get("/webhook")
async def get_webhook(runtime: RuntimeDep) -> JSONResponse:
    return _webhook(runtime)


@router.put("/webhook")
async def put_webhook(runtime: RuntimeDep, config: WebhookConfig) -> JSONResponse:
    """``{"url": ..., "signing_key": ...}``; ``{"url": null}`` turns notifications off."""
    runtime.webhooks.configure(config)
    return _webhook(runtime)


@router.post("/transactions/{transaction_id}/expire")
async def expire(transaction_id: str, runtime: RuntimeDep) -> JSONResponse:
    """Make valid_until pass now: pending fails, sent/submitted is replaced by a no-op."""
    return JSONResponse(runtime.transactions.expire(transaction_id))


@router.get("/stats")
async def stats(runtime: RuntimeDep) -> JSONResponse:
    return JSONResponse(
        {
            "lifecycle": runtime.lifecycle.stats(),
            "faults": dict(runtime.faults.injected),
            "hanging": runtime.transactions.hanging,
            "webhooks": dict(runtime.webhooks.stats) | {"pending": runtime.webhooks.pending},
            # relayer id -> its transactions not yet mined (pending, sent or submitted)
            "jammed_relayers": {
                rid: runtime.store.in_flight(rid) for rid in runtime.faults.jammed_relayers
            },
        }
    )


def _validated(model: type[M], current: dict[str, Any], patch: dict[str, Any]) -> M:
    try:
        return model.model_validate(current | patch)
    except ValidationError as exc:
        raise RequestValidationError(exc.errors()) from None
