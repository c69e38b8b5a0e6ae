"""What a request says to the database: statements and transaction ends, counted on the
engine, and the round trips sent past it (relay_wire.direct) as one entry each, their
statements joined by "; " (the publisher and other background work are left out by the
caller's timing)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from relay_wire import direct


@contextlib.contextmanager
def recorded(engine: AsyncEngine) -> Iterator[list[str]]:
    """Every statement (its first words) and every COMMIT / ROLLBACK while the block runs."""
    seen: list[str] = []
    sync = engine.sync_engine

    def statement(_conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
        seen.append(" ".join(sql.split()[:3]))

    def commit(_conn: Any) -> None:
        seen.append("COMMIT")

    def rollback(_conn: Any) -> None:
        seen.append("ROLLBACK")

    execute = direct.execute

    async def direct_execute(conn: Any, sql: str, args: Any = (), **options: Any) -> list[int]:
        seen.append("; ".join(" ".join(part.split()[:3]) for part in sql.split(";")))
        return await execute(conn, sql, args, **options)

    listeners = (("before_cursor_execute", statement), ("commit", commit), ("rollback", rollback))
    for name, fn in listeners:
        event.listen(sync, name, fn)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(direct, "execute", direct_execute)
            yield seen
    finally:
        for name, fn in listeners:
            event.remove(sync, name, fn)
