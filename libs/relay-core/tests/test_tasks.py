"""Background loops are stopped for certain, although Python 3.11 can lose a cancellation."""

from __future__ import annotations

import asyncio
import contextlib
import sys

from relay_core.tasks import cancel_all


async def _a_loop_whose_call_ends_as_it_is_cancelled() -> tuple[asyncio.Task[None], int]:
    """A loop like the consumer's housekeeping: a call under ``wait_for`` (as asyncmy's
    connect is), its error caught, again after a pause. The call fails in the very turn the
    loop is cancelled, as a refused connection does."""
    loop = asyncio.get_running_loop()
    calls: list[asyncio.Future[None]] = []

    async def run() -> None:
        while True:
            call = loop.create_future()
            calls.append(call)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(call, 10)
            await asyncio.sleep(0.05)

    task = asyncio.create_task(run())
    await asyncio.sleep(0)
    calls[-1].set_exception(ConnectionRefusedError())
    task.cancel()
    await asyncio.sleep(0.2)
    return task, len(calls)


async def test_python_loses_a_cancellation_that_arrives_as_the_awaited_call_ends() -> None:
    task, calls = await _a_loop_whose_call_ends_as_it_is_cancelled()
    if sys.version_info < (3, 12):  # why cancel_all cancels again: cancelled once, it ran on
        assert not task.done()
        assert calls > 1
    await asyncio.wait_for(cancel_all([task], recheck_s=0.1), 5)
    assert task.cancelled()


async def test_a_task_that_lost_its_cancellation_is_cancelled_again() -> None:
    async def loses_the_first() -> None:
        lost = 0
        while True:
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                if lost:
                    raise
                lost += 1

    task = asyncio.create_task(loses_the_first())
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_all([task], recheck_s=0.1), 5)
    assert task.cancelled()


async def test_tasks_already_ended_or_ending_at_once_are_waited_for() -> None:
    async def forever() -> None:
        await asyncio.Event().wait()

    ended = asyncio.create_task(asyncio.sleep(0))
    await ended
    running = [asyncio.create_task(forever()) for _ in range(3)]
    await asyncio.wait_for(cancel_all([ended, *running]), 1)
    assert all(task.cancelled() for task in running)
    assert not ended.cancelled()
    await cancel_all([])
