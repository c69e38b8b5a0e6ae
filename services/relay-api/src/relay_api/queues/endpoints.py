"""Operators: the lanes of work, their pause/drain switch and their consumers, the dead letters
(operator and admin keys; a purge, admin keys only). Every change is in the audit log."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query

from relay_api.deps import (
    CallerDep,
    JsonBody,
    RuntimeDep,
    UowDep,
    require_admin,
    require_operator,
)
from relay_api.openapi import AUTHENTICATED, WITH_BODY, errors
from relay_api.queues import dlq, service
from relay_api.queues.schemas import (
    DeadLetters,
    DeadLetterView,
    LaneChange,
    Purged,
    QueuesView,
    RedriveRequest,
    RedriveResult,
)
from relay_api.responses import Json
from relay_core import audit
from relay_core.controls import LaneState
from relay_core.errors import BadRequest

router = APIRouter(prefix="/api/v1/admin/queues", tags=["admin"])

# Every lane that can exist; one not deployed here (the fast lane switched off) is a 400.
LaneName = Literal["normal", "fast"]
Lane = Annotated[LaneName, Path(description="a lane: fast or normal")]
LaneQuery = Annotated[LaneName, Query(description="whose DLQ: normal (default) or fast")]
NOTES = {403: "The key is neither an operator's nor an admin's"}
NO_LANE = "The lane is not deployed here (the fast lane switched off)"


@router.get(
    "",
    response_model=QueuesView,
    responses=errors(*AUTHENTICATED, notes=NOTES),
    operation_id="getQueues",
)
async def queues(caller: CallerDep, uow: UowDep, runtime: RuntimeDep) -> Json:
    """Each lane's switch, what each consumer last reported, and the queues' depths (what
    ``relay queues status`` prints)."""
    require_operator(caller)
    return Json(await service.status(uow.session, runtime.queue.sqs, runtime.settings))


@router.patch(
    "/{lane}",
    response_model=QueuesView,
    responses=errors(*AUTHENTICATED, *WITH_BODY, notes={**NOTES, 400: NO_LANE}),
    dependencies=[JsonBody],
    operation_id="switchLane",
)
async def switch_lane(
    lane: Lane, body: LaneChange, caller: CallerDep, uow: UowDep, runtime: RuntimeDep
) -> Json:
    """Pause, drain or resume a lane (``relay queues pause|drain|resume``). Every consumer
    obeys within ``RELAY_CONSUMER_CONTROL_INTERVAL_S`` (2 s): paused, it receives nothing and
    finishes what it holds; its state reads ``pausing`` until it holds nothing."""
    require_operator(caller)
    await service.switch(uow.session, lane, LaneState(body.state), caller.actor(), body.reason)
    return Json(await service.status(uow.session, runtime.queue.sqs, runtime.settings))


dlq_router = APIRouter(prefix="/api/v1/admin/dlq", tags=["admin"])


@dlq_router.get(
    "",
    response_model=DeadLetters,
    responses=errors(*AUTHENTICATED, 422, notes={**NOTES, 400: NO_LANE}),
    operation_id="listDeadLetters",
)
async def dead_letters(
    caller: CallerDep,
    uow: UowDep,
    runtime: RuntimeDep,
    limit: Annotated[int, Query(ge=1, le=1000, description="most messages to read")] = 100,
    lane: LaneQuery = "normal",
) -> Json:
    """A lane's DLQ messages, each with its reason and its transaction's row (``relay dlq
    list``). Reading takes nothing from the queue."""
    require_operator(caller)
    return Json(await dlq.listing(uow.session, runtime.queue.sqs, runtime.settings, limit, lane))


@dlq_router.get(
    "/{ref}",
    response_model=DeadLetterView,
    responses=errors(
        *AUTHENTICATED,
        422,
        notes={**NOTES, 400: NO_LANE, 404: "No such message or transaction in the DLQ"},
    ),
    operation_id="getDeadLetter",
)
async def dead_letter(
    ref: Annotated[str, Path(min_length=1, max_length=100, description="message or tx id")],
    caller: CallerDep,
    uow: UowDep,
    runtime: RuntimeDep,
    lane: LaneQuery = "normal",
) -> Json:
    """One dead letter, with the body as sent and its row's history (``relay dlq show``)."""
    require_operator(caller)
    return Json(await dlq.show(uow.session, runtime.queue.sqs, runtime.settings, ref, lane))


@dlq_router.post(
    "/redrive",
    response_model=RedriveResult,
    responses=errors(
        *AUTHENTICATED, *WITH_BODY, notes={**NOTES, 400: f"Neither messages nor all, or: {NO_LANE}"}
    ),
    dependencies=[JsonBody],
    operation_id="redriveDeadLetters",
)
async def redrive_dead_letters(
    body: RedriveRequest, caller: CallerDep, runtime: RuntimeDep, lane: LaneQuery = "normal"
) -> Json:
    """Send the chosen messages' transactions back to the work queue, each exactly once, their
    rows made ready for the consumer to decide afresh (``relay dlq redrive``; docs/runbook.md
    says which rows can be). What cannot be redriven stays in the DLQ, with why."""
    require_operator(caller)
    if body.messages is None and not body.all:
        raise BadRequest("messages: name the messages to redrive, or send all: true")
    return Json(
        await dlq.redrive(
            runtime.sessions,
            runtime.queue.sqs,
            runtime.settings,
            runtime.cache,
            body.messages,
            by=caller.actor(),
            lane=lane,
        )
    )


@dlq_router.delete(
    "",
    response_model=Purged,
    responses=errors(
        *AUTHENTICATED,
        422,
        notes={
            403: "The key is not an admin key",
            400: f"confirm does not name the DLQ, or: {NO_LANE}",
        },
    ),
    operation_id="purgeDeadLetters",
)
async def purge_dead_letters(
    caller: CallerDep,
    runtime: RuntimeDep,
    confirm: Annotated[str | None, Query(max_length=100, description="the DLQ's name")] = None,
    lane: LaneQuery = "normal",
) -> Json:
    """Delete every message of the DLQ (``relay dlq purge``); ``confirm`` must name it. Rows
    are not touched: those still waiting are found by the reconciler and enqueued again.
    Admin keys only."""
    require_admin(caller)
    purged = await dlq.purge(runtime.queue.sqs, runtime.settings, confirm, lane)
    async with runtime.sessions() as session, session.begin():
        audit.record(
            session,
            caller.actor(),
            "dlq.purge",
            "dlq",
            target_name=lane,
            after={"purged": purged},
        )
    return Json({"purged": purged})
