"""The lanes of work as an operator sees and switches them: the same view and the same rules
for ``relay queues status|pause|resume|drain`` and the admin endpoints."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from relay_core import controls, queue
from relay_core.settings import InfraSettings


async def status(session: AsyncSession, sqs: Any, settings: InfraSettings) -> dict[str, Any]:
    """Each lane's switch, each consumer's report, and the queues' depths."""
    view = await controls.overview(session, settings.lanes())
    view["depths"] = await queue.depths(sqs, settings)
    return view


async def switch(
    session: AsyncSession, lane: str, state: controls.LaneState, by: str, reason: str | None
) -> None:
    await controls.set_lane_state(session, controls.check_lane(lane), state, by, reason)
