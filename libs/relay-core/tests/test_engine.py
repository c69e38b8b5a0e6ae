"""The pool returns connections without a ROLLBACK after a COMMIT, and never hands out a
connection that still holds a transaction (REPEATABLE READ would pin its read snapshot)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from relay_core.db.engine import create_engine, fill_pool
from relay_core.settings import InfraSettings


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    # One pooled connection, so every checkout below gets the same one back.
    settings = InfraSettings(database_url=database_url, database_pool_size=1)
    engine = create_engine(settings)
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE probe (id INT PRIMARY KEY, n INT)"))
        await conn.execute(text("INSERT INTO probe VALUES (1, 0)"))
    yield engine
    await engine.dispose()


async def _set(database_url: str, n: int) -> None:
    """Change the row from another connection (another engine), committed."""
    other = create_engine(InfraSettings(database_url=database_url, database_pool_size=1))
    try:
        async with other.begin() as conn:
            await conn.execute(text("UPDATE probe SET n = :n WHERE id = 1"), {"n": n})
    finally:
        await other.dispose()


async def _read(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        value = (await conn.execute(text("SELECT n FROM probe WHERE id = 1"))).scalar_one()
        await conn.commit()
    return int(value)


async def _session_rollbacks(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        row = (await conn.execute(text("SHOW SESSION STATUS LIKE 'Com_rollback'"))).one()
        await conn.commit()
    return int(row[1])


async def test_a_committed_unit_of_work_goes_back_to_the_pool_without_a_rollback(
    engine: AsyncEngine,
) -> None:
    before = await _session_rollbacks(engine)
    for n in range(1, 6):
        async with engine.begin() as conn:
            await conn.execute(text("UPDATE probe SET n = :n WHERE id = 1"), {"n": n})
    assert await _session_rollbacks(engine) == before
    assert await _read(engine) == 5


async def test_a_connection_returned_inside_a_transaction_is_rolled_back(
    engine: AsyncEngine, database_url: str
) -> None:
    # Open a transaction behind SQLAlchemy's back (on the driver connection), read, and give
    # the connection back: SQLAlchemy does not know a transaction is open, the server does.
    async with engine.connect() as conn:
        raw = await conn.get_raw_connection()
        cursor = raw.driver_connection.cursor()
        await cursor.execute("SELECT n FROM probe WHERE id = 1")
        await cursor.fetchall()
        await cursor.close()
        assert raw.driver_connection.get_transaction_status()
    await _set(database_url, 42)
    # Without the reset the same connection would still read its old snapshot (0).
    assert await _read(engine) == 42


async def test_a_session_that_only_read_does_not_pin_its_snapshot(
    engine: AsyncEngine, database_url: str
) -> None:
    assert await _read(engine) == 0
    async with engine.connect() as conn:  # read, then close without commit or rollback
        await conn.execute(text("SELECT n FROM probe WHERE id = 1"))
    await _set(database_url, 7)
    assert await _read(engine) == 7


async def test_the_pool_can_be_filled_before_the_first_burst(database_url: str) -> None:
    engine = create_engine(InfraSettings(database_url=database_url, database_pool_size=3))
    try:
        assert await fill_pool(engine, 3) == 3
        assert engine.pool.checkedin() == 3  # type: ignore[attr-defined]
    finally:
        await engine.dispose()


async def test_filling_the_pool_of_an_unreachable_database_gives_up_quietly() -> None:
    settings = InfraSettings(
        database_url="mysql://root@127.0.0.1:1/none", database_connect_timeout_s=1.0
    )
    engine = create_engine(settings)
    try:
        assert await fill_pool(engine, 3) == 0
    finally:
        await engine.dispose()
