"""Operators: the relayer pool, each relayer's state as the consumers see it, and its
pause/resume switch (operator and admin keys). Every change is in the audit log."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from relay_api.deps import CallerDep, JsonBody, RuntimeDep, UowDep, require_operator
from relay_api.openapi import AUTHENTICATED, WITH_BODY, errors
from relay_api.relayers import service
from relay_api.relayers.schemas import RelayerChange, RelayersView
from relay_api.responses import Json

router = APIRouter(prefix="/api/v1/admin/relayers", tags=["admin"])

Relayer = Annotated[str, Path(min_length=1, max_length=64, description="a relayer's id")]
NOTES = {403: "The key is neither an operator's nor an admin's"}


@router.get(
    "",
    response_model=RelayersView,
    responses=errors(*AUTHENTICATED, notes=NOTES),
    operation_id="getRelayers",
)
async def relayers(caller: CallerDep, uow: UowDep, runtime: RuntimeDep) -> Json:
    """Each relayer of the pool: its state (ok, paused, open, jammed, low; unknown until a
    consumer reports it), what it holds, its balance, when it last mined (what ``relay
    relayers`` prints)."""
    require_operator(caller)
    return Json(await service.status(uow.session, runtime.settings))


@router.patch(
    "/{relayer}",
    response_model=RelayersView,
    responses=errors(
        *AUTHENTICATED, *WITH_BODY, notes={**NOTES, 400: "The relayer is not in the pool"}
    ),
    dependencies=[JsonBody],
    operation_id="switchRelayer",
)
async def switch_relayer(
    relayer: Relayer, body: RelayerChange, caller: CallerDep, uow: UowDep, runtime: RuntimeDep
) -> Json:
    """Pause or resume a relayer (``relay relayers pause|resume``). Every consumer obeys
    within ``RELAY_RELAYER_WATCH_INTERVAL_S`` (5 s): paused, the relayer is given no new
    transaction and finishes those it holds (they are never sent elsewhere)."""
    require_operator(caller)
    await service.switch(
        uow.session,
        runtime.settings,
        relayer,
        body.state == "paused",
        caller.actor(),
        body.reason,
    )
    return Json(await service.status(uow.session, runtime.settings))
