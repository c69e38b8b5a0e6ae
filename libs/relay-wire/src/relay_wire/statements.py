"""Statements on one asyncmy connection, for relay_wire.direct's pool: a statement list sent
in one round trip (values escaped into the text, or a prepared statement's values sent in the
binary protocol), each statement's affected rows or the first one's rows back, and a driver
error turned into SQLAlchemy's exception for it, saying whether the connection is still in
step (``lost``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.exc import DBAPIError

# asyncmy's client-side error numbers start here (CR_* codes: lost connection, cannot
# connect...); below it the server answered and the connection is still in step, except for
# the server's own goodbyes (killed, shutting down, idle too long: as SQLAlchemy's MySQL
# dialect counts them).
_CLIENT_ERRORS = 2000
_SERVER_HUNG_UP = frozenset({1053, 1927, 4031})
# SERVER_STATUS_NO_BACKSLASH_ESCAPES: the session's sql_mode has NO_BACKSLASH_ESCAPES
NO_BACKSLASH_ESCAPES = 0x200
_BACKSLASH_ESCAPES_ON = (
    "SET SESSION sql_mode = TRIM(BOTH ',' FROM "
    "REPLACE(CONCAT(',', @@SESSION.sql_mode, ','), ',NO_BACKSLASH_ESCAPES,', ','))"
)


async def escape_with_backslashes(conn: Any) -> None:
    """Take NO_BACKSLASH_ESCAPES out of ``conn``'s session (why: relay_wire.direct)."""
    await execute(conn, _BACKSLASH_ESCAPES_ON)
    if conn.server_status & NO_BACKSLASH_ESCAPES:
        raise translate(
            "connect",
            (),
            asyncmy_errors().OperationalError(
                0, "the session's sql_mode keeps NO_BACKSLASH_ESCAPES: values cannot be escaped"
            ),
            invalidated=True,
        )


# What asyncmy raises, not as one of its errors, when the connection it is opening was closed
# by the other side during the handshake (a proxy or load balancer that accepts and resets,
# a server going down): the database did not answer, like a refused connect.
_CONNECT_CUT = "Transport does not expose socket instance"


def connect_cut(exc: BaseException) -> bool:
    return isinstance(exc, RuntimeError) and _CONNECT_CUT in str(exc)


def lost_while_connecting(exc: BaseException) -> Exception:
    """The driver's own error for a connection lost while connecting (CR_SERVER_LOST)."""
    error: Exception = asyncmy_errors().OperationalError(
        2013, f"Lost connection to MySQL server while connecting ({exc})"
    )
    return error


def usable(conn: Any) -> bool:
    return bool(conn.connected) and not getattr(conn, "_stream_broken", False)


def lost(conn: Any, exc: BaseException) -> bool:
    """Whether ``exc`` left ``conn`` unusable (else the server answered and it is in step)."""
    code = code_of(exc)
    if code is None or code <= 0 or code >= _CLIENT_ERRORS or code in _SERVER_HUNG_UP:
        return True
    return not usable(conn)


DEADLOCK_TRIES = 3  # a deadlock's victim done again up to twice
_DEADLOCK = 1213  # ER_LOCK_DEADLOCK


def deadlocked(exc: BaseException) -> bool:
    """Whether ``exc`` says the server chose its transaction as a deadlock's victim: it rolled
    all of that transaction back, so the transaction can be done again from its start."""
    return code_of(exc) == _DEADLOCK


def code_of(exc: BaseException) -> int | None:
    """The MySQL error number of a driver error (or of the one a DBAPIError wraps)."""
    if isinstance(exc, DBAPIError):
        exc = exc.orig  # type: ignore[assignment]
    code = exc.args[0] if exc.args else None
    return code if isinstance(code, int) else None


async def execute(
    conn: Any, sql: str, args: Sequence[Any] = (), *, prepare: bool = False
) -> list[int]:
    """Run ``sql`` on ``conn`` in one round trip; each statement's affected rows. A driver
    error comes out as SQLAlchemy's exception for it. ``prepare``: see :meth:`DirectPool.run`."""
    counts, _ = await _send(conn, sql, args, rows=False, prepare=prepare)
    return counts


async def fetch(
    conn: Any, sql: str, args: Sequence[Any] = (), *, prepare: bool = False
) -> list[tuple[Any, ...]]:
    """Run ``sql`` on ``conn`` in one round trip; the rows of its first statement."""
    _, rows = await _send(conn, sql, args, rows=True, prepare=prepare)
    return rows


async def _send(
    conn: Any, sql: str, args: Sequence[Any], *, rows: bool, prepare: bool = False
) -> tuple[list[int], list[tuple[Any, ...]]]:
    try:
        async with conn.cursor() as cursor:
            if prepare:  # asyncmy prepares it on first use and keeps it (stmt_cache_size)
                await cursor.execute(sql, tuple(args))
            else:
                # The values escaped into the text here: given to execute, they would make
                # asyncmy try to prepare every statement, a round trip each time for the
                # ones built per call. A naive datetime goes as the text MySQL reads it
                # back (asyncmy's own formatting of one costs four times as much).
                text = sql
                if args:
                    text = cursor.mogrify(sql, tuple(map(_text_of_naive_datetime, args)))
                await cursor.execute(text)
            fetched = list(await cursor.fetchall()) if rows else []
            counts = [cursor.rowcount]
            while await cursor.nextset():
                counts.append(cursor.rowcount)
            # asyncmy keeps the connection's server status from a result only when it is not
            # 0 (which, in autocommit mode, it never is); should a result say 0 (no
            # transaction, autocommit off) the connection would still say "in a transaction"
            # and be rolled back for nothing on its way back to the pool. The last result
            # knows better.
            last = getattr(cursor, "_result", None)
            if last is not None:
                conn.server_status = last.server_status
            return counts, fetched
    except Exception as exc:
        errors = asyncmy_errors()
        if isinstance(exc, errors.Error):
            raise translate(sql, args, exc, invalidated=lost(conn, exc)) from exc
        raise


def _text_of_naive_datetime(value: Any) -> Any:
    if type(value) is datetime and value.tzinfo is None:
        return value.isoformat(" ")  # '2026-11-26 01:02:03.456789', as asyncmy writes it
    return value


def asyncmy_errors() -> Any:
    import asyncmy.errors

    return asyncmy.errors


def translate(sql: str, args: Sequence[Any], exc: Exception, *, invalidated: bool) -> DBAPIError:
    shown = sql if len(sql) <= 400 else sql[:400] + "..."
    # (a driver error always comes back as a DBAPIError subclass)
    return DBAPIError.instance(  # type: ignore[return-value]
        shown,
        None if len(args) > 20 else list(args),
        exc,
        asyncmy_errors().Error,
        connection_invalidated=invalidated,
    )
