"""The lanes of work as an operator sees and switches them: the same view and the same rules
for ``relay queues status|pause|resume|drain`` and the admin endpoints."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from relay_core import audit, controls, queue
from relay_core.settings import InfraSettings


async def status(session: AsyncSession, sqs: Any, settings: InfraSettings) -> dict[str, Any]:
    """Each lane's switch, each consumer's report, and the queues' depths."""
    view = await controls.overview(session, settings.lanes())
    view["depths"] = await queue.depths(sqs, settings)
    return view


# What the audit log calls each switch.
ACTIONS = {
    controls.LaneState.paused: "lane.pause",
    controls.LaneState.draining: "lane.drain",
    controls.LaneState.running: "lane.resume",
}


async def switch(
    session: AsyncSession,
    lane: str,
    state: controls.LaneState,
    actor: audit.Actor,
    reason: str | None,
) -> None:
    lane = controls.check_lane(lane)
    before = (await controls.lane_states(session)).get(lane, controls.LaneState.running)
    await controls.set_lane_state(session, lane, state, actor.name, reason)
    audit.record(
        session,
        actor,
        ACTIONS[state],
        "lane",
        target_name=lane,
        before={"state": before.value},
        after={"state": state.value, "reason": reason},
    )
