"""A TCP proxy on loopback that can cut a service off: ``cut`` resets every open connection
and refuses new ones (a failover, a network partition); ``restore`` listens again on the same
port. It runs its own event loop in a thread, so blocking tests and asyncio ones can use it."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable

from relay_core.localsqs import free_port


class TcpProxy:
    """Forwards 127.0.0.1:port to a target. ``cut`` resets every open connection and refuses
    new ones (the service unreachable); ``restore`` listens again on the same port."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.port = free_port()
        self._target = (target_host, target_port)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._transports: set[asyncio.BaseTransport] = set()

    def __enter__(self) -> TcpProxy:
        self._thread.start()
        self._run(self._listen())
        return self

    def __exit__(self, *exc: object) -> None:
        self._run(self._close(abort=True))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def cut(self) -> None:
        self._run(self._close(abort=True))

    def restore(self) -> None:
        self._run(self._listen())

    def _run(self, coroutine: Awaitable[None]) -> None:
        asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(10)  # type: ignore[arg-type]

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def _close(self, *, abort: bool) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        if abort:
            for transport in list(self._transports):
                transport.abort()  # type: ignore[attr-defined]
            self._transports.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
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
