"""The direct pool (relay_wire.direct): a statement committed by itself, statements sent
together as one transaction in one round trip, fixed statements prepared once per
connection, values converted as SQLAlchemy converts them, SQLAlchemy's exceptions, and a pool
that keeps what is healthy and drops what is not."""

from __future__ import annotations

import asyncio
import tomllib
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from sqlalchemy import JSON, Column, Integer, MetaData, String, Table, text
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncEngine

from relay_core.db.engine import create_engine
from relay_core.db.models import Timestamp
from relay_core.settings import InfraSettings
from relay_wire import direct as direct_db
from relay_wire import statements
from relay_wire.direct import DirectPool

PROBE = Table(
    "probe",
    MetaData(),
    Column("id", Integer, primary_key=True),
    Column("name", String(8)),
    Column("doc", JSON),
    Column("at", Timestamp),
)


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(InfraSettings(database_url=database_url, database_pool_size=2))
    async with engine.begin() as conn:
        await conn.run_sync(PROBE.metadata.create_all)
    yield engine
    await engine.dispose()


@pytest.fixture
async def pool(engine: AsyncEngine) -> AsyncIterator[DirectPool]:
    made = DirectPool.create(engine, size=2, timeout_s=2.0)
    assert made is not None
    yield made
    await made.close()


async def _rows(engine: AsyncEngine) -> list[tuple[object, ...]]:
    async with engine.connect() as conn:
        return [tuple(r) for r in await conn.execute(text("SELECT * FROM probe ORDER BY id"))]


def test_only_mysql_through_asyncmy_gets_a_direct_pool(tmp_path: object) -> None:
    sqlite = create_engine(InfraSettings(database_url=f"sqlite:///{tmp_path}/x.db"))
    assert DirectPool.create(sqlite, size=4, timeout_s=1.0) is None


@pytest.mark.parametrize("prepare", [False, True], ids=["text", "prepared"])
async def test_an_insert_commits_by_itself_in_one_round_trip_with_sqlalchemy_values(
    engine: AsyncEngine, pool: DirectPool, prepare: bool
) -> None:
    at = datetime(2026, 11, 25, 8, 0, 0, 123456)
    whole_second = datetime(2026, 11, 25, 8, 0, 1)
    rows = [
        {"id": 1, "name": "a", "doc": {"k": [1, 2]}, "at": at},
        {"id": 2, "name": "b", "doc": None, "at": None},
        {"id": 3, "name": "c", "doc": "é'\\", "at": whole_second},
    ]
    sql, args = pool.row(PROBE).insert(rows)
    assert await pool.run(sql, args, prepare=prepare) == [3]
    async with engine.connect() as conn:
        raw = [tuple(r) for r in await conn.execute(text("SELECT id, doc, at FROM probe"))]
        # None in a JSON column is JSON null, as SQLAlchemy writes it (not SQL NULL)
        assert raw[1][1] == "null"
        loaded = (await conn.execute(PROBE.select().order_by(PROBE.c.id))).all()
    assert [tuple(r) for r in loaded] == [
        (1, "a", {"k": [1, 2]}, at),
        (2, "b", None, None),
        (3, "c", "é'\\", whole_second),
    ]
    assert pool.connects == 1


async def test_each_statement_reports_its_rows_and_nothing_is_left_open(
    engine: AsyncEngine, pool: DirectPool
) -> None:
    sql, args = pool.row(PROBE, ("id", "name")).insert([{"id": i, "name": "x"} for i in (1, 2, 3)])
    await pool.run(sql, args)
    counts = await pool.run(
        ["UPDATE probe SET name = %s WHERE id = %s", "UPDATE probe SET name = %s WHERE id = %s"],
        ["y", 2, "y", 99],
    )
    assert counts == [1, 0]
    async with pool.connection() as conn:  # left open: rolled back, not committed
        await direct_db.execute(conn, "START TRANSACTION; UPDATE probe SET name = 'z' WHERE id = 1")
    assert [r[1] for r in await _rows(engine)] == ["x", "y", "x"]
    assert pool.connects == 1  # and the connection was kept


async def test_a_duplicate_is_sqlalchemys_integrity_error_and_the_connection_is_kept(
    engine: AsyncEngine, pool: DirectPool
) -> None:
    sql, args = pool.row(PROBE, ("id",)).insert([{"id": 1}])
    await pool.run(sql, args, prepare=True)
    with pytest.raises(IntegrityError) as raised:
        await pool.run(sql, args, prepare=True)
    assert not raised.value.connection_invalidated
    await pool.run("UPDATE probe SET name = 'ok' WHERE id = 1")
    assert pool.connects == 1
    assert await _rows(engine) == [(1, "ok", None, None)]


async def test_a_failure_mid_batch_commits_nothing_of_it(
    engine: AsyncEngine, pool: DirectPool
) -> None:
    too_long = "x" * 50  # name is VARCHAR(8): strict mode refuses it
    with pytest.raises(DBAPIError):
        await pool.run(
            ["INSERT INTO probe (id) VALUES (1)", "UPDATE probe SET name = %s WHERE id = 1"],
            [too_long],
        )
    assert await _rows(engine) == []


async def test_a_connection_killed_while_idle_is_never_handed_out(
    engine: AsyncEngine, pool: DirectPool
) -> None:
    async with pool.connection() as conn:
        (victim,) = (await _fetch(conn, "SELECT CONNECTION_ID()"))[0]
    async with engine.connect() as conn:
        await conn.execute(text(f"KILL {int(victim)}"))
    await asyncio.sleep(0.1)  # the server's close reaches the socket
    assert await pool.run("INSERT INTO probe (id) VALUES (7)") == [1]
    assert pool.connects == 2


async def test_a_connection_lost_mid_statement_is_dropped_with_every_idle_one(
    engine: AsyncEngine, pool: DirectPool
) -> None:
    async with pool.connection() as first, pool.connection() as second:
        await _fetch(first, "SELECT 1")
        await _fetch(second, "SELECT 1")

    async def hung_up() -> None:
        async with pool.connection() as conn:
            (own,) = (await _fetch(conn, "SELECT CONNECTION_ID()"))[0]
            await direct_db.execute(conn, f"KILL {int(own)}")  # the server hangs up on it
            await direct_db.execute(conn, "SELECT 1")

    with pytest.raises(OperationalError) as raised:
        await hung_up()
    assert raised.value.connection_invalidated
    assert pool.connects == 2
    # The idle one went with it (a restarted server leaves them all dead): a new one serves.
    assert await pool.run("INSERT INTO probe (id) VALUES (7)") == [1]
    assert pool.connects == 3


@pytest.mark.parametrize("failure", ["cancelled_mid_statement", "callers_own_error"])
async def test_an_error_that_is_not_a_lost_connection_closes_that_connection_alone(
    engine: AsyncEngine, pool: DirectPool, failure: str
) -> None:
    async with pool.connection() as first, pool.connection() as second:
        await _fetch(first, "SELECT 1")
        await _fetch(second, "SELECT 1")
    assert pool.connects == 2

    async def fails() -> None:
        if failure == "cancelled_mid_statement":  # as the group commit's own timeout does
            async with asyncio.timeout(0.2), pool.connection() as conn:
                await direct_db.execute(conn, "DO SLEEP(2)")
        else:
            async with pool.connection() as conn:
                await _fetch(conn, "SELECT 1")
                raise ValueError("the caller's own")

    with pytest.raises((TimeoutError, ValueError)):
        await fails()
    # The other connection was not gone, and is still there...
    async with pool.connection() as conn:
        await _fetch(conn, "SELECT 1")
    assert pool.connects == 2
    # ...while the failed one (its answer may still be on its way) was not kept.
    async with pool.connection(), pool.connection():
        pass
    assert pool.connects == 3


def test_the_driver_is_pinned_past_cve_2025_65896_and_with_its_statement_cache() -> None:
    # asyncmy 0.2.18 fixes CVE-2025-65896 and has the stmt_cache_size the pool passes.
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    (pin,) = [
        Requirement(line)
        for line in project["project"]["optional-dependencies"]["mysql"]
        if Requirement(line).name == "asyncmy"
    ]
    assert not pin.specifier.contains("0.2.17")
    assert pin.specifier.contains("0.2.18")


async def test_a_full_pool_makes_work_wait_and_then_gives_up(engine: AsyncEngine) -> None:
    pool = DirectPool.create(engine, size=1, timeout_s=0.3)
    assert pool is not None
    try:
        async with pool.connection():
            waiting = asyncio.create_task(pool.run("SELECT 1"))
            with pytest.raises(PoolTimeout, match="no direct connection free"):
                await waiting
        # Freed: the next one gets it at once.
        assert await pool.run("SELECT 1") == [1]
    finally:
        await pool.close()


def _deadlocked_once(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The first statement sent is chosen as a deadlock's victim; the statements sent."""
    import asyncmy.errors

    execute = direct_db.execute
    calls: list[str] = []

    async def deadlocked_once(
        conn: object, sql: str, args: object = (), *, prepare: bool = False
    ) -> list[int]:
        calls.append(sql)
        if len(calls) == 1:
            error = asyncmy.errors.OperationalError(1213, "Deadlock found")
            raise statements.translate(sql, [], error, invalidated=False) from error
        return await execute(conn, sql, args, prepare=prepare)  # type: ignore[arg-type]

    monkeypatch.setattr(direct_db, "execute", deadlocked_once)
    return calls


async def test_a_deadlock_victim_is_sent_again(
    engine: AsyncEngine, pool: DirectPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _deadlocked_once(monkeypatch)
    assert await pool.run("INSERT INTO probe (id) VALUES (1)") == [1]
    assert len(calls) == 2
    assert [r[0] for r in await _rows(engine)] == [1]


async def test_work_cancelled_while_its_error_is_rolled_back_stops_there(
    engine: AsyncEngine, pool: DirectPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _deadlocked_once(monkeypatch)
    rollback = pool._rollback

    async def slow_rollback(conn: object) -> None:
        await asyncio.sleep(0.2)  # (a round trip, widened to be hit)
        await rollback(conn)

    monkeypatch.setattr(pool, "_rollback", slow_rollback)
    work = asyncio.create_task(pool.run("INSERT INTO probe (id) VALUES (1)"))
    await asyncio.sleep(0.05)  # the deadlock is being rolled back
    work.cancel()
    with pytest.raises(asyncio.CancelledError):
        await work
    # Not taken for a deadlock to send again: cancelled work does nothing more.
    assert len(calls) == 1
    assert await _rows(engine) == []


async def test_a_connection_given_back_after_close_is_closed(engine: AsyncEngine) -> None:
    pool = DirectPool.create(engine, size=1, timeout_s=1.0)
    assert pool is not None
    async with pool.connection() as conn:
        await pool.close()
    assert not conn.connected
    assert pool._slots.open == 0


async def _fetch(conn: object, sql: str) -> list[tuple[object, ...]]:
    async with conn.cursor() as cursor:  # type: ignore[attr-defined]
        await cursor.execute(sql)
        return list(await cursor.fetchall())


async def test_a_finished_transaction_goes_back_without_a_rollback(
    engine: AsyncEngine, pool: DirectPool
) -> None:
    async with pool.connection() as conn:
        await direct_db.execute(conn, "INSERT INTO probe (id) VALUES (1)")
        assert not conn.get_transaction_status()  # autocommit: committed by itself
        await direct_db.execute(conn, "START TRANSACTION; UPDATE probe SET name = 'a' WHERE id = 1")
        assert conn.get_transaction_status()
        await direct_db.execute(conn, "COMMIT")
        assert not conn.get_transaction_status()
        (before,) = await _fetch(conn, "SHOW SESSION STATUS LIKE 'Com_rollback'")
    for _ in range(3):
        await pool.run("UPDATE probe SET name = 'b' WHERE id = 1")
        await pool.run(["UPDATE probe SET name = 'c' WHERE id = 1", "DO 1"])
    async with pool.connection() as conn:
        (after,) = await _fetch(conn, "SHOW SESSION STATUS LIKE 'Com_rollback'")
    assert after == before
    assert pool.connects == 1


async def test_a_waiter_cancelled_after_its_wake_passes_the_connection_on(
    engine: AsyncEngine,
) -> None:
    pool = DirectPool.create(engine, size=1, timeout_s=2.0)
    assert pool is not None
    try:
        async with pool.connection():
            first = asyncio.create_task(pool.run("SELECT 1"))
            second = asyncio.create_task(pool.run("SELECT 1"))
            await asyncio.sleep(0.05)  # both wait for the one connection
        first.cancel()  # woken by the release, cancelled before it could take it
        assert await asyncio.wait_for(second, 1.0) == [1]
        with pytest.raises(asyncio.CancelledError):
            await first
    finally:
        await pool.close()


async def test_a_fixed_statement_is_prepared_once_per_connection_and_a_built_one_never(
    engine: AsyncEngine, pool: DirectPool
) -> None:
    insert_one = pool.row(PROBE, ("id", "name")).insert([{"id": 0, "name": ""}])[0]
    for i in range(1, 4):
        assert await pool.run(insert_one, [i, "p"], prepare=True) == [1]
    for i in range(4, 7):  # the same statement as text, and statements built per call
        assert await pool.run(insert_one, [i, "t"]) == [1]
        built = f"UPDATE probe SET name = %s WHERE id IN ({i})"  # noqa: S608 (a test literal)
        assert await pool.run(built, ["u"]) == [1]
    async with pool.connection() as conn:
        ((_, prepared),) = await _fetch(conn, "SHOW SESSION STATUS LIKE 'Com_stmt_prepare'")
        ((_, executed),) = await _fetch(conn, "SHOW SESSION STATUS LIKE 'Com_stmt_execute'")
    assert (int(prepared), int(executed)) == (1, 3)
    assert pool.connects == 1
    assert [r[1] for r in await _rows(engine)] == ["p"] * 3 + ["u"] * 3
    with pytest.raises(ValueError, match="single statement"):
        await pool.run([insert_one, insert_one], [7, "x", 8, "x"], prepare=True)


async def test_a_connect_cut_during_the_handshake_is_an_operational_error(
    pool: DirectPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """asyncmy raises a bare RuntimeError when the connection it is opening is closed by the
    other side during the handshake (a proxy that accepts and resets, a server going down):
    callers must see the database unreachable (OperationalError, as a refused connect), not an
    unexpected error; any other RuntimeError is left alone."""
    raised: list[BaseException] = []

    async def cut(**kwargs: object) -> object:
        raise raised[-1]

    monkeypatch.setattr(pool._asyncmy, "connect", cut)
    raised.append(RuntimeError("Transport does not expose socket instance"))
    with pytest.raises(OperationalError) as lost:
        await pool.fetch("SELECT 1")
    assert lost.value.connection_invalidated
    assert "while connecting" in str(lost.value)
    raised.append(RuntimeError("something else"))
    with pytest.raises(RuntimeError, match="something else"):
        await pool.fetch("SELECT 1")
