"""relay_wire.slots: room for so many connections, waiters woken in turn, a wake never lost
to a waiter that left."""

from __future__ import annotations

import asyncio
import time

import pytest

from relay_wire.slots import Slots


async def test_room_is_counted_and_a_waiter_gives_up_at_its_deadline() -> None:
    slots = Slots(2)
    assert slots.take()
    assert slots.take()
    assert not slots.take()
    assert not await slots.wait(time.monotonic() + 0.05)
    slots.closed()
    assert slots.take()


async def test_waiters_are_woken_in_turn_and_a_cancelled_one_passes_its_wake_on() -> None:
    slots = Slots(1)
    assert slots.take()
    deadline = time.monotonic() + 2
    first = asyncio.create_task(slots.wait(deadline))
    second = asyncio.create_task(slots.wait(deadline))
    await asyncio.sleep(0.01)
    slots.wake()  # meant for the first...
    first.cancel()  # ...which leaves before it can look: the second is woken instead
    assert await asyncio.wait_for(second, 1) is True
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_a_wake_that_comes_as_the_deadline_falls_due_is_not_lost() -> None:
    slots = Slots(1)
    assert slots.take()
    now = time.monotonic()
    first = asyncio.create_task(slots.wait(now + 0.05))
    second = asyncio.create_task(slots.wait(now + 5))
    await asyncio.sleep(0.01)
    time.sleep(0.06)  # the loop is busy past the first one's deadline...
    await asyncio.sleep(0)  # ...whose timer is now due in the same iteration as the wake:
    slots.closed()  # room, for the first in line
    # The first was woken: it says so (or passes the wake on); nobody waits for nothing.
    assert await first is True
    assert slots.take()
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
