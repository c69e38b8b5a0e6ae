"""The operator's switch (``relay_core.controls``) as one consumer follows it: every few
seconds it reads each lane's state, stops or starts that lane's pollers, ends a drain once the
lane's queue is empty, and reports what it is doing, one row per lane."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

from queue_consumer import metrics
from queue_consumer.lanes import Lane
from relay_core import controls
from relay_core.db.models import utcnow

log = logging.getLogger(__name__)


class Switch:
    def __init__(
        self,
        lanes: Sequence[Lane],
        sessions: Any,
        sqs: Any,
        consumer_id: str,
        *,
        circuit: Callable[[], str],
    ) -> None:
        """``circuit``: the executor circuit's state, reported beside each lane's."""
        self.lanes = lanes
        self._sessions = sessions
        self._sqs = sqs
        self._consumer_id = consumer_id
        self._circuit = circuit
        self._started_at = utcnow()

    async def watch(self, interval_s: float) -> None:
        """Follow the switch every ``interval_s`` (the consumer reads it once itself before
        its pollers start)."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.follow()
            except Exception as exc:  # the database is down: keep doing what we were doing
                log.warning("consumer.switch.failed", extra={"error": str(exc)[:200]})

    async def follow(self) -> None:
        async with self._sessions() as session:
            states = await controls.lane_states(session)
        for lane in self.lanes:
            state = states.get(lane.name, controls.LaneState.running)
            if state is not lane.state:
                log.info("consumer.switch", extra={"lane": lane.name, "state": state.value})
                lane.state = state
            if state is controls.LaneState.paused:
                lane.receiving.clear()
            else:
                lane.receiving.set()
            metrics.LANE_RECEIVING.labels(lane.name).set(float(lane.receiving.is_set()))
            if state is controls.LaneState.draining and await self._drained(lane):
                async with self._sessions() as session, session.begin():
                    if await controls.finish_drain(session, lane.name, self._consumer_id):
                        log.info("consumer.drained", extra={"lane": lane.name})
        await self.report()

    @staticmethod
    def state(lane: Lane) -> str:
        """running; pausing while the lane still has work or a poller inside a receive;
        paused."""
        if lane.receiving.is_set():
            return "running"
        busy = lane.work or lane.parked < lane.pollers
        return "pausing" if busy else "paused"

    async def report(self, *, stopped: bool = False) -> None:
        """This consumer's report, one per lane it serves."""
        async with self._sessions() as session, session.begin():
            for lane in self.lanes:
                mine = controls.Report(
                    consumer_id=self._consumer_id,
                    lane=lane.name,
                    state="stopped" if stopped else self.state(lane),
                    in_flight=len(lane.work),
                    received=lane.received,
                    circuit=self._circuit(),
                    started_at=self._started_at,
                )
                await controls.report(session, mine)

    async def _drained(self, lane: Lane) -> bool:
        """Nothing held here, the last receive came back empty, and SQS agrees: nothing
        visible, in flight elsewhere or delayed."""
        if lane.work or not lane.quiet:
            return False
        response = await self._sqs.get_queue_attributes(
            QueueUrl=lane.queue_url,
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            ],
        )
        return not any(int(v) for v in response.get("Attributes", {}).values())
