"""Stopping background tasks for certain."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any


async def cancel_all(tasks: Iterable[asyncio.Task[Any]], recheck_s: float = 1.0) -> None:
    """Cancel ``tasks`` and return once every one has ended (their results and errors are
    left to the caller). Python 3.11's ``wait_for`` loses a cancellation that arrives just as
    the call it waits on ends (asyncmy's connect is one, and it ends at once while a database
    refuses connections), so a loop that catches that call's error runs on as if never
    cancelled: a task still running after ``recheck_s`` is cancelled again."""
    pending = {task for task in tasks if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=recheck_s)
