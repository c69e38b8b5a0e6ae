"""The hot paths' few fixed statements, sent on driver connections of their own (MySQL and
MariaDB through asyncmy; ``None`` elsewhere, and callers go through SQLAlchemy as before).

Why: through a Session, one INSERT and its COMMIT cost ~0.6 ms of client CPU here against
~0.17 ms sent on the driver connection (docs/performance.md, issue 18), and the consumer's
group commit paid one round trip per compare-and-set. Here a statement list goes out as one
multi-statement query (asyncmy always asks for CLIENT_MULTI_STATEMENTS): a group commit's
compare-and-sets are one round trip, its inserts and COMMIT another.

The connections are in autocommit mode: a single statement (the accept path's INSERT, the
publisher's mark, a batch's SELECT) is its own transaction, committed by the server with one
answer (an ``INSERT; COMMIT`` costs two); several statements that must commit together open
their transaction themselves (:meth:`DirectPool.run` with a list writes ``START TRANSACTION;
...; COMMIT``). A process's few fixed statements (the accept path's INSERT) can be sent as
server-side prepared statements (``prepare=True``): prepared once per connection, then only
their values travel, in the binary protocol, with no escaping. Together, one accepted row's
INSERT costs about half the client CPU of a text ``INSERT; COMMIT`` (docs/performance.md).

What stays the same: values are converted by the columns' own SQLAlchemy bind processors
(JSON through orjson, ``None`` as JSON ``null``) and escaped by the driver exactly as before;
errors come out as SQLAlchemy's exceptions (``IntegrityError``, ``OperationalError``...; no
connection free in time is its pool's ``TimeoutError``), so every handler above (409 on a
duplicate, 503 on an outage, the consumer's retry) is unchanged.

The pool is small and strict: at most ``size`` connections (beside SQLAlchemy's pool: both
count towards MySQL's ``max_connections``); a connection the driver reports gone (lost,
killed, the server shutting down) is closed and every idle one with it (a restarted server
leaves them all dead); one that failed otherwise in a way that may have left it out of step
(cancelled mid-statement, an error of the caller's) is closed alone; and one older than
``recycle_s`` is replaced when it is next taken.

Escaping: text values are escaped by the driver with backslashes, which a session in
``NO_BACKSLASH_ESCAPES`` sql_mode reads as plain characters (the driver follows that mode for
text, not for bytes: a quote in a bytes value then ends its literal). The server reports the
mode in every connection's handshake, so only a session that has it pays one more round trip
at connect, to take it out of that session's sql_mode (every statement sent here is this
module's own, none relies on the mode); a session that still reports it is refused. What it
does not do: check values itself (no per-statement cost); a lone surrogate (not storable in
utf8mb4) is refused by the driver's encoder as ``UnicodeEncodeError`` before anything is
sent, and the connection is kept.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol

from relay_wire.slots import Slots
from relay_wire.sqlrows import Loader, Row
from relay_wire.statements import (
    DEADLOCK_TRIES,
    NO_BACKSLASH_ESCAPES,
    connect_cut,
    deadlocked,
    escape_with_backslashes,
    execute,
    fetch,
    lost_while_connecting,
    translate,
    usable,
)

__all__ = ["DirectPool", "execute", "fetch"]
from sqlalchemy import Table
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncEngine

log = logging.getLogger(__name__)

# Server-side prepared statements kept per connection: MySQL's max_prepared_stmt_count (16,382
# by default) is shared by every connection of the server.
_PREPARED_PER_CONNECTION = 8


class PoolSettings(Protocol):
    """What :meth:`DirectPool.opened` reads from a process's settings."""

    database_direct_pool_size: int
    database_pool_timeout_s: float
    database_connect_timeout_s: float


class DirectPool:
    def __init__(
        self,
        engine: AsyncEngine,
        *,
        size: int,
        timeout_s: float,
        connect_timeout_s: float = 3.0,
        recycle_s: float = 1800.0,
    ) -> None:
        import asyncmy  # the db extra's driver; only MySQL URLs get here

        self._asyncmy = asyncmy
        self.dialect: Dialect = engine.dialect
        _, kwargs = engine.dialect.create_connect_args(engine.url)
        self._connect_kwargs = {
            **kwargs,
            "connect_timeout": connect_timeout_s,
            "autocommit": True,
            # asyncmy's per-connection cache of prepared statements (prepare=True only: a text
            # statement never reaches it, see _send), least recently used closed past it.
            "stmt_cache_size": _PREPARED_PER_CONNECTION,
        }
        self._timeout_s = timeout_s
        self._recycle_s = recycle_s
        self._idle: collections.deque[Any] = collections.deque()
        self._born: dict[Any, float] = {}  # when each open connection was made
        self._slots = Slots(size)
        self._closed = False
        self._rows: dict[tuple[str, tuple[str, ...] | None], Row] = {}
        self._loaders: dict[type[Any], Loader] = {}
        self.connects = 0

    @classmethod
    def create(
        cls, engine: AsyncEngine, *, size: int, timeout_s: float, connect_timeout_s: float = 3.0
    ) -> DirectPool | None:
        if engine.dialect.name != "mysql" or engine.dialect.driver != "asyncmy" or size < 1:
            return None
        return cls(engine, size=size, timeout_s=timeout_s, connect_timeout_s=connect_timeout_s)

    @classmethod
    @contextlib.asynccontextmanager
    async def opened(
        cls, engine: AsyncEngine, settings: PoolSettings
    ) -> AsyncIterator[DirectPool | None]:
        """A process's pool (``RELAY_DATABASE_DIRECT_POOL_SIZE``), closed when the block
        ends; ``None`` where there is none (SQLite, or the size set to 0)."""
        pool = cls.create(
            engine,
            size=settings.database_direct_pool_size,
            timeout_s=settings.database_pool_timeout_s,
            connect_timeout_s=settings.database_connect_timeout_s,
        )
        try:
            yield pool
        finally:
            if pool is not None:
                await pool.close()

    # --- the statements -----------------------------------------------------------------

    def row(self, table: Table, columns: tuple[str, ...] | None = None) -> Row:
        """``table``'s INSERT (of ``columns``, else all), built on first use."""
        found = self._rows.get((table.name, columns))
        if found is None:
            found = self._rows[(table.name, columns)] = Row(table, self.dialect, columns)
        return found

    def loader(self, cls: type[Any]) -> Loader:
        """Reads of mapped ``cls`` (all its columns) as detached objects, built on first use."""
        found = self._loaders.get(cls)
        if found is None:
            found = self._loaders[cls] = Loader(cls, self.dialect)
        return found

    async def fetch(
        self, sql: str, args: Sequence[Any] = (), *, prepare: bool = False
    ) -> list[tuple[Any, ...]]:
        """The rows of ``sql`` (a SELECT, its own transaction), in one round trip on a
        connection of its own. ``prepare``: as for :meth:`run` (the rows then come in the
        binary protocol, decoded without parsing text)."""
        async with self.connection() as conn:
            return await fetch(conn, sql, args, prepare=prepare)

    async def run(
        self, sql: str | Sequence[str], args: Sequence[Any] = (), *, prepare: bool = False
    ) -> list[int]:
        """One transaction in one round trip on a connection of its own: ``sql`` one
        statement (committed by itself), or a list of statements sent as ``START
        TRANSACTION; ...; COMMIT``; ``args`` fill their placeholders in order. Each
        statement's affected rows. On an error nothing of it is committed. A deadlock victim
        (the server rolled all of it back) is sent again, up to twice.

        ``prepare``: ``sql`` is one statement the process sends again and again with other
        values (never one built per call), sent as a prepared statement."""
        several = not isinstance(sql, str)
        if several:
            if prepare:
                raise ValueError("only a single statement can be prepared")
            sql = "; ".join(["START TRANSACTION", *sql, "COMMIT"])
        for attempt in range(DEADLOCK_TRIES):
            try:
                async with self.connection() as conn:
                    counts = await execute(conn, sql, args, prepare=prepare)  # type: ignore[arg-type]
                    return counts[1:-1] if several else counts
            except DBAPIError as exc:
                if attempt + 1 == DEADLOCK_TRIES or not deadlocked(exc):
                    raise
                log.info("db.direct.deadlock_retried", extra={"attempt": attempt + 1})
        raise AssertionError("unreachable")

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Any]:
        """A connection for statements that span round trips (:func:`execute` on it; a
        transaction over several starts with ``START TRANSACTION``); what it leaves
        uncommitted is rolled back, and one that failed uncleanly is closed."""
        conn = await self._acquire()
        try:
            yield conn
        except BaseException as exc:
            await self._after_error(conn, exc)
            raise
        if conn.get_transaction_status():
            await self._after_error(conn, None)  # left open: not ours to commit
        else:
            self._release(conn)

    # --- the pool -----------------------------------------------------------------------

    async def _acquire(self) -> Any:
        deadline = time.monotonic() + self._timeout_s
        while True:
            if self._closed:
                raise RuntimeError("the direct pool is closed")
            while self._idle:
                conn = self._idle.pop()  # the most recently used: warm, alive
                if usable(conn) and time.monotonic() - self._born[conn] < self._recycle_s:
                    return conn
                self._forget(conn)
            if self._slots.take():
                try:
                    return await self._connect()
                except BaseException:
                    self._slots.closed()
                    raise
            if not await self._slots.wait(deadline):
                # SQLAlchemy's own pool says it so: callers tell a full pool from a failure
                raise PoolTimeout(f"no direct connection free within {self._timeout_s} s")

    async def _connect(self) -> Any:
        try:
            conn: Any = await self._asyncmy.connect(**self._connect_kwargs)
        except self._asyncmy.errors.Error as exc:
            raise translate("connect", (), exc, invalidated=True) from exc
        except RuntimeError as exc:
            if not connect_cut(exc):
                raise
            raise translate("connect", (), lost_while_connecting(exc), invalidated=True) from exc
        if conn.server_status & NO_BACKSLASH_ESCAPES:
            try:
                await escape_with_backslashes(conn)
            except BaseException:
                conn.close()
                raise
        self._born[conn] = time.monotonic()
        self.connects += 1
        return conn

    def _release(self, conn: Any) -> None:
        if self._closed:  # given back after close(): nobody will take it again
            self._forget(conn)
            return
        self._idle.append(conn)
        self._slots.wake()

    def _forget(self, conn: Any) -> None:
        conn.close()
        self._born.pop(conn, None)
        self._slots.closed()

    async def _after_error(self, conn: Any, exc: BaseException | None) -> None:
        """Roll back what ``conn`` left open and keep it, when the server answered the error
        (a duplicate key, a deadlock) or nothing was sent (a value the driver cannot encode).
        When the driver says the connection is gone, close it and every idle one too;
        after any other error (cancelled, the caller's own) close it alone: whether an answer
        is still on its way cannot be told, but nothing says the others are gone."""
        if (
            exc is None
            or isinstance(exc, UnicodeEncodeError)  # (encoded whole before a byte is written)
            or (isinstance(exc, DBAPIError) and not exc.connection_invalidated)
        ):
            try:
                await self._rollback(conn)
            except Exception:
                self._forget(conn)
                return
            except BaseException:  # cancelled meanwhile: the cancellation goes on up
                self._forget(conn)
                raise
            self._release(conn)
            return
        self._forget(conn)
        if isinstance(exc, DBAPIError):  # invalidated: the connection, or the server, is gone
            while self._idle:
                self._forget(self._idle.pop())

    async def _rollback(self, conn: Any) -> None:
        async with asyncio.timeout(self._timeout_s):
            await conn.rollback()

    async def close(self) -> None:
        self._closed = True
        while self._idle:
            conn = self._idle.pop()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.ensure_closed(), 1.0)
            self._forget(conn)
        self._slots.wake_all()
