"""A TCP proxy on loopback that can cut a service off: ``cut`` resets every open connection
and every new one (a failover, a network partition); ``restore`` lets them through again. The
proxy keeps its port while cut, so nothing else on the machine can take it meanwhile (a client
would then hang on a stranger's port instead of failing fast). It runs its own event loop in a
thread, so blocking tests and asyncio ones can use it."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable

from relay_devstack.localsqs import free_port


class TcpProxy:
    """Forwards 127.0.0.1:port to a target. ``cut`` resets every open connection and each new
    one as soon as it is accepted (the service unreachable); ``restore`` forwards again."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.port = free_port()
        self._target = (target_host, target_port)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._transports: set[asyncio.BaseTransport] = set()
        self._cuts = 0  # a connection still connecting upstream when cut must not outlive it
        self._down = False

    def __enter__(self) -> TcpProxy:
        self._thread.start()
        self._run(self._listen())
        return self

    def __exit__(self, *exc: object) -> None:
        self._run(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def cut(self) -> None:
        self._run(self._cut())

    def restore(self) -> None:
        self._down = False

    def _run(self, coroutine: Awaitable[None]) -> None:
        asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(10)  # type: ignore[arg-type]

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def _cut(self) -> None:
        self._down = True
        self._cuts += 1
        for transport in list(self._transports):
            transport.abort()  # type: ignore[attr-defined]
        self._transports.clear()

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        await self._cut()
        others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._down:
            writer.transport.abort()
            return
        cuts = self._cuts
        self._transports.add(writer.transport)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            self._transports.discard(writer.transport)
            writer.transport.abort()
            return
        if cuts != self._cuts:
            up_writer.transport.abort()
            writer.transport.abort()
            return
        pair = (writer.transport, up_writer.transport)
        self._transports.update(pair)
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            for transport in pair:
                self._transports.discard(transport)
                transport.abort()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(OSError, RuntimeError):
        writer.write_eof()
