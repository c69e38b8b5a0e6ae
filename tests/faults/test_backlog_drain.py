"""Invariant 9 in figures, on the shipped defaults: after an executor outage ends, the backlog
starts moving within 10 s and drains at no less than 80 % of the steady throughput.

Two consumer processes first work through a queue of 4,000 transactions with the executor
answering (the steady throughput); the same two then through 4,000 sent while it answers 429
to everything for 30 s; then two new ones, as at first, through 4,000 more with the executor
answering. The steady rate is the mean of the first and the last: the rig's throughput drifts
over the scenario (against the first alone, the same code measured 74-126 % here). Every rate
is read the same way, from the moments the database says each transaction was handed to the
executor, and with the same work beside it: each phase's transactions are final before the
next starts (the rig has no API for the executor's webhooks, so the tracker learns their
statuses; it waits 15 s after a send, and not while the circuit is open, so without this its
reads of the steady 4,000 would fall on the drain)."""

from __future__ import annotations

import asyncio
import subprocess
import time
from datetime import datetime
from typing import Any

import pytest
from consumer_testkit import sync_engine
from rig import Rig, seed, send_to_lanes, settle, tally
from sqlalchemy import text

from relay_core.db.models import utcnow

# solo: a ratio of two throughputs measured a minute apart; beside other fault scenarios on
# two cores, their changing load moved it by a third (make test-faults runs it alone, after).
pytestmark = [pytest.mark.faults, pytest.mark.solo, pytest.mark.timeout(900)]

COUNT = 4000
STORM_S = 30.0


def _rate(moments: list[datetime]) -> float:
    span = (moments[-1] - moments[0]).total_seconds()
    return (len(moments) - 1) / span if span > 0 else float("inf")


async def _all_handed_over(database_url: str, ids: set[str], timeout_s: float) -> list[datetime]:
    """When each of ``ids`` was handed to the executor, once every row seeded so far was (or
    the time is up). Waiting costs a COUNT a second: reading every row each second, as this
    once did, took a fifth to a third of a core from the processes measured (top, 4,000 rows)
    and read twice the rows in the second phase as in the first."""
    engine = sync_engine(database_url)
    deadline = time.monotonic() + timeout_s
    try:
        with engine.connect() as conn:
            while time.monotonic() < deadline:
                seeded, handed = conn.execute(
                    text("SELECT COUNT(*), COUNT(submitted_at) FROM transactions")
                ).one()
                conn.commit()  # the next COUNT sees a new snapshot
                if handed == seeded:
                    break
                await asyncio.sleep(1)
            found = conn.execute(
                text("SELECT id, submitted_at FROM transactions WHERE submitted_at IS NOT NULL")
            )
            return sorted(at for tx_id, at in found if tx_id in ids)
    finally:
        engine.dispose()


async def test_after_a_429_storm_the_backlog_moves_within_10_s_at_80_percent_of_steady(
    rig: Rig, sqs: Any
) -> None:
    started = time.monotonic()
    steady = seed(rig.database_url, COUNT, "mixed")
    before_rate, consumers = await _steady_rate(rig, sqs, steady, "first")
    # Their statuses learned before the storm, as the executor's webhooks would have told
    # them: otherwise the tracker's catch-up on these 4,000 (due 15 s after each was sent,
    # held while the circuit is open) lands on the drain and is measured as the backlog's.
    await settle(rig.database_url, steady, 300)

    rig.stub.faults(rate_limit_rate=1.0, rate_limit_after_s=2)
    backlog = seed(rig.database_url, COUNT, "mixed", first=COUNT)
    await send_to_lanes(sqs, rig.lanes, rig.database_url, backlog)
    await asyncio.sleep(STORM_S)
    rig.stub.faults()
    ended = utcnow()
    moments = await _all_handed_over(rig.database_url, set(backlog), 300)
    assert len(moments) == COUNT
    moving_after_s = (moments[0] - ended).total_seconds()
    drain_rate = _rate(moments)
    await settle(rig.database_url, steady + backlog, 300)
    counts = tally(
        "backlog of 4,000 after 30 s of 429", rig.database_url, rig.stub, steady + backlog, ended
    )

    # The steady measure again, after the storm, the same way: the machine's throughput
    # drifts over the scenario's two minutes (the SQS server's and the database's work grow
    # with what they hold), so the drain is judged against the mean of before and after.
    for consumer in consumers:
        consumer.terminate()
    for consumer in consumers:
        consumer.wait(60)
    after = seed(rig.database_url, COUNT, "mixed", first=2 * COUNT)
    # Its recovery is timed from its own start: no fault came before it, and timed from the
    # storm's end it also counted the drain, the settling and the consumers' restart (CI: 64.6
    # s against a bound of 60 for a queue that drained at 622/s).
    again_from = utcnow()
    after_rate, _ = await _steady_rate(rig, sqs, after, "again")
    steady_rate = (before_rate + after_rate) / 2

    await settle(rig.database_url, after, 300)
    again = tally("the steady measure after", rig.database_url, rig.stub, after, again_from)
    counts.seconds = time.monotonic() - started
    counts.notes.append(
        f"steady {before_rate:.0f}/s before and {after_rate:.0f}/s after, drained at "
        f"{drain_rate:.0f}/s ({drain_rate / steady_rate:.0%} of their mean), moving after "
        f"{moving_after_s:.1f} s; the steady measure after recovered in {again.recovery_s:.1f} s"
    )
    rig.record(counts)
    assert counts.clean, counts.line()
    assert again.clean, again.line()
    assert moving_after_s <= 10, counts.line()
    assert drain_rate >= 0.8 * steady_rate, counts.line()


async def _steady_rate(
    rig: Rig, sqs: Any, ids: list[str], name: str
) -> tuple[float, list[subprocess.Popen[bytes]]]:
    """The rate at which two consumers started on a queue already holding ``ids`` hand them
    to an executor that answers; and the consumers."""
    await send_to_lanes(sqs, rig.lanes, rig.database_url, ids)
    consumers = [rig.processes.consumer(f"consumer-{name}-{n}") for n in range(2)]
    moments = await _all_handed_over(rig.database_url, set(ids), 300)
    assert len(moments) == COUNT
    return _rate(moments), consumers
