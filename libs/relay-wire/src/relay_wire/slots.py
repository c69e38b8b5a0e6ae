"""Room for at most so many open connections, and a queue of those waiting for one: the part
the direct pool (relay_wire.direct) and the HTTP client (relay_wire.http) share. Each keeps
its own idle connections and decides when one is still good; here only the count of open
ones, who waits, and who is woken when one is given back or closed."""

from __future__ import annotations

import asyncio
import collections
import time


class Slots:
    def __init__(self, size: int) -> None:
        self.size = size
        self.open = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    def take(self) -> bool:
        """Count one more open connection, if there is room: the caller then opens it (and
        calls :meth:`closed` if that fails)."""
        if self.open >= self.size:
            return False
        self.open += 1
        return True

    def closed(self) -> None:
        """One open connection fewer: its room goes to the next in line."""
        self.open -= 1
        self.wake()

    def wake(self) -> None:
        """Tell the first waiter to look again (a connection was given back, or closed)."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def wake_all(self) -> None:
        """Wake every waiter (the pool is closing: each finds out for itself)."""
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait(self, deadline: float) -> bool:
        """Wait for a wake until ``deadline`` (``time.monotonic()``); False if it passed."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(max(deadline - time.monotonic(), 0)):
                await waiter
            return True
        except TimeoutError:
            # Woken in the very iteration the deadline fell due: the wake is this waiter's
            # (returning False would drop it, and the next in line would wait for nothing).
            return waiter.done() and not waiter.cancelled()
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.wake()  # woken, then cancelled: the wake goes to the next in line
            raise
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
