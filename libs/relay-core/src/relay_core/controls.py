"""Pause, resume and drain: an operator's switch per lane of work, kept in the database so every
consumer process reads the same one (no signal to deliver, nothing lost with a restart).

- ``running``: consumers receive and process as usual (no row means running);
- ``paused``: no consumer receives a message; what each holds is finished; messages wait in
  SQS, untouched (their receive counts do not move, none is dead-lettered, the reconciler
  leaves their rows alone);
- ``draining``: consumers go on until the lane's queue is empty, then the first to see it
  empty switches the lane to ``paused`` (before maintenance: finish what is queued, then stop).

Each consumer reads its lane's switch every few seconds and writes a report of itself
(``consumer_reports``): its state (``running``, ``pausing`` while it still holds work or a
receive already under way, ``paused``, ``stopped``), what it holds, what it received, its
executor circuit. ``relay queues status`` and ``GET /api/v1/admin/queues`` read them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from relay_core.db.models import ConsumerReport, QueueControl, utcnow
from relay_core.errors import BadRequest

LANES = ("normal", "fast")  # every lane that can exist (settings.lanes(): those deployed)
FORGET_AFTER = timedelta(hours=1)  # a consumer not heard of for this long is dropped


class LaneState(StrEnum):
    running = "running"
    paused = "paused"
    draining = "draining"


# What an operator asks for, and the state it sets.
ACTIONS = {"pause": LaneState.paused, "resume": LaneState.running, "drain": LaneState.draining}


def check_lane(lane: str) -> str:
    if lane not in LANES:
        raise BadRequest(f"lane: {lane!r} is not a lane (lanes: {', '.join(LANES)})")
    return lane


async def lane_state(session: AsyncSession, lane: str) -> LaneState:
    state = await session.scalar(select(QueueControl.state).where(QueueControl.lane == lane))
    return LaneState(state) if state else LaneState.running


async def lane_states(session: AsyncSession) -> dict[str, LaneState]:
    """Every lane's switch in one read (a lane with no row is running)."""
    rows = (await session.execute(select(QueueControl.lane, QueueControl.state))).all()
    found = {lane: LaneState(state) for lane, state in rows}
    return {lane: found.get(lane, LaneState.running) for lane in LANES}


async def set_lane_state(
    session: AsyncSession, lane: str, state: LaneState, by: str, reason: str | None = None
) -> None:
    row = await session.get(QueueControl, check_lane(lane), with_for_update=True)
    if row is None:
        session.add(
            QueueControl(
                lane=lane, state=state.value, reason=reason, changed_by=by, changed_at=utcnow()
            )
        )
    else:
        row.state, row.reason, row.changed_by, row.changed_at = state.value, reason, by, utcnow()
    await session.flush()


async def finish_drain(session: AsyncSession, lane: str, by: str) -> bool:
    """Draining → paused, if it is still draining (an operator may have resumed meanwhile)."""
    result = await session.execute(
        update(QueueControl)
        .where(QueueControl.lane == lane, QueueControl.state == LaneState.draining.value)
        .values(
            state=LaneState.paused.value,
            reason="drained: the queue was empty",
            changed_by=by,
            changed_at=utcnow(),
        )
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class Report:
    consumer_id: str
    lane: str
    state: str
    in_flight: int
    received: int
    circuit: str
    started_at: datetime


async def report(session: AsyncSession, mine: Report) -> None:
    """Write this consumer's report (and forget consumers silent for an hour)."""
    now = utcnow()
    row = await session.get(ConsumerReport, (mine.consumer_id, mine.lane))
    if row is None:
        session.add(
            ConsumerReport(
                consumer_id=mine.consumer_id,
                lane=mine.lane,
                state=mine.state,
                in_flight=mine.in_flight,
                received=mine.received,
                circuit=mine.circuit,
                started_at=mine.started_at,
                seen_at=now,
            )
        )
        await session.execute(
            delete(ConsumerReport).where(ConsumerReport.seen_at < now - FORGET_AFTER)
        )
    else:
        row.state, row.in_flight = mine.state, mine.in_flight
        row.received, row.circuit, row.seen_at = mine.received, mine.circuit, now


async def overview(session: AsyncSession, lanes: Sequence[str] = LANES) -> dict[str, Any]:
    """Every lane's switch and every consumer's latest report, as the CLI and the admin
    endpoint show them (SQS depths are added by the caller, which has the queue)."""
    controls = {c.lane: c for c in (await session.scalars(select(QueueControl))).all()}
    now = utcnow()
    reports = (
        await session.scalars(
            select(ConsumerReport).order_by(ConsumerReport.consumer_id, ConsumerReport.lane)
        )
    ).all()
    views = []
    for lane in lanes:
        control = controls.get(lane)
        views.append(
            {
                "lane": lane,
                "state": control.state if control else LaneState.running.value,
                "reason": control.reason if control else None,
                "changedBy": control.changed_by if control else None,
                "changedAt": _iso(control.changed_at) if control else None,
            }
        )
    consumers = [
        {
            "consumer": r.consumer_id,
            "lane": r.lane,
            "state": r.state,
            "inFlight": r.in_flight,
            "received": r.received,
            "circuit": r.circuit,
            "startedAt": _iso(r.started_at),
            "seenSecondsAgo": round((now - r.seen_at).total_seconds(), 1),
        }
        for r in reports
    ]
    return {"lanes": views, "consumers": consumers}


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds") + "Z"
