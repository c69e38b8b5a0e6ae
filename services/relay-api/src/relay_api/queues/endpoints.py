"""Operators: the lanes of work, their pause/drain switch and their consumers (admin keys)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from relay_api.deps import CallerDep, JsonBody, RuntimeDep, UowDep, require_admin
from relay_api.openapi import AUTHENTICATED, WITH_BODY, errors
from relay_api.queues import service
from relay_api.queues.schemas import LaneChange, QueuesView
from relay_api.responses import Json
from relay_core.controls import LaneState

router = APIRouter(prefix="/api/v1/admin/queues", tags=["admin"])

Lane = Annotated[str, Path(min_length=1, max_length=32, description="a lane: normal")]
NOTES = {403: "The key is not an admin key"}


@router.get(
    "",
    response_model=QueuesView,
    responses=errors(*AUTHENTICATED, notes=NOTES),
    operation_id="getQueues",
)
async def queues(caller: CallerDep, uow: UowDep, runtime: RuntimeDep) -> Json:
    """Each lane's switch, what each consumer last reported, and the queues' depths (what
    ``relay queues status`` prints)."""
    require_admin(caller)
    return Json(await service.status(uow.session, runtime.queue.sqs, runtime.settings))


@router.patch(
    "/{lane}",
    response_model=QueuesView,
    responses=errors(*AUTHENTICATED, *WITH_BODY, notes={**NOTES, 400: "No such lane"}),
    dependencies=[JsonBody],
    operation_id="switchLane",
)
async def switch_lane(
    lane: Lane, body: LaneChange, caller: CallerDep, uow: UowDep, runtime: RuntimeDep
) -> Json:
    """Pause, drain or resume a lane (``relay queues pause|drain|resume``). Every consumer
    obeys within ``RELAY_CONSUMER_CONTROL_INTERVAL_S`` (2 s): paused, it receives nothing and
    finishes what it holds; its state reads ``pausing`` until it holds nothing."""
    require_admin(caller)
    await service.switch(uow.session, lane, LaneState(body.state), caller.name, body.reason)
    return Json(await service.status(uow.session, runtime.queue.sqs, runtime.settings))
