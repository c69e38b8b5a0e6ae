"""Hostile text through every statement the direct pool (relay_wire.direct) sends, against
the real MariaDB: values go into multi-statement text queries escaped by the driver, so a
quote, a backslash, a NUL or a four-byte character that came back different (or ended a
statement early) would be a bug, and on a server whose sql_mode reads backslashes as plain
characters (NO_BACKSLASH_ESCAPES) an injection.

The statement shapes are those the callers send: the API's accept INSERT (prepared,
relay_api.relay.repository.add) and the same INSERT as text (the group commit's event and
notification INSERTs), the consumer's batch SELECT (prepared, queue_consumer's
load_many_direct), the group commit itself (relay_core.db.transitions.write_changes_direct: the
joined compare-and-set UPDATE, the per-row compare-and-sets it falls back to, the INSERTs and
COMMIT) and the publisher's mark (relay_api.outbox.repository.mark_enqueued_direct). The two
services' statements are written out here as they build them: a library's tests do not
import the services above it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any
from urllib.parse import quote

import pytest
from sqlalchemy import insert, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from relay_core.db.engine import create_engine
from relay_core.db.models import (
    NOTIFICATIONS,
    TRANSACTION_EVENTS,
    TRANSACTIONS,
    ApiClient,
    Transaction,
)
from relay_core.db.transitions import Change, write_changes_direct
from relay_core.settings import InfraSettings
from relay_wire import direct as direct_db
from relay_wire.direct import DirectPool

HOSTILE = [
    "'",
    "''",
    '"',
    "\\",
    "\\'",
    "'\\",
    "\\\\'",
    "\\' OR 1=1 -- ",
    "'; DROP TABLE transactions; --",
    "\\'; DROP TABLE transactions; -- ",
    '"); DROP TABLE notifications; #',
    "\x00",
    "a\x00b\x00'",
    "\r\n\t\x1a\x08",
    "`id`",
    "%s",
    "%(id)s %%",
    "?",
    "NULL",
    "é 中文 ß",
    "😀🦄𝄞",
    "'😀\\\x00",
    "trailing space ",
    "\u2028\ufeff\u202e",
]
# TEXT holds 65,535 bytes: this, escaped, is far longer than that on the wire.
LONG_TEXT = "'\\😀\x00" * 9_000
# A JSON column is LONGTEXT: a megabyte of quotes and backslashes in one document.
LONG_JSON = "'\\\"" * 350_000

NO_BACKSLASH_ESCAPES = "SET SESSION sql_mode = CONCAT(@@SESSION.sql_mode, ',NO_BACKSLASH_ESCAPES')"


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    """The test's own engine: its rows set up and read back on SQLAlchemy's connections."""
    engine = create_engine(InfraSettings(database_url=database_url, database_pool_size=2))
    yield engine
    await engine.dispose()


@pytest.fixture(params=["server_default", "no_backslash_escapes"])
async def pool(database_url: str, request: pytest.FixtureRequest) -> AsyncIterator[DirectPool]:
    """A direct pool on the server's sql_mode, and one whose every session starts with
    NO_BACKSLASH_ESCAPES (as a server configured so would give it)."""
    url = database_url
    if request.param == "no_backslash_escapes":
        url += "?init_command=" + quote(NO_BACKSLASH_ESCAPES)
    engine = create_engine(InfraSettings(database_url=url, database_pool_size=1))
    made = DirectPool.create(engine, size=2, timeout_s=5.0)
    assert made is not None
    yield made
    await made.close()
    await engine.dispose()


CLIENT = "client-'\\😀"


def _row(tx_id: str, value: str, i: int) -> dict[str, Any]:
    """A transaction row as the accept path writes it, ``value`` in every text column."""
    now = datetime(2026, 11, 26, 12, 0, 0, 123456)
    return {
        **{column.key: None for column in TRANSACTIONS.columns},
        "id": tx_id,
        "client_id": CLIENT,
        "type": "direct",
        "status": "pending",
        "version": 1,
        "request": {"to": value, value: [value, {"nested": value}], "long": LONG_JSON[: i * 10]},
        "request_fingerprint": value[:64],
        "idempotency_key": f"{tx_id}:{value}"[:255],
        "callback_url": f"https://hooks.example/{value}"[:2048],
        "attempts": 0,
        "dead_letters": 0,
        "lane": "normal",
        "created_at": now,
        "updated_at": now,
    }


def _id(kind: str, i: int, value: str) -> str:
    # A prefix of its own per row: the column's collation (case- and padding-insensitive,
    # every four-byte character alike) would take some of the values for each other.
    return f"{kind}{i:02d}{value}"[:36]


async def test_hostile_text_comes_back_unchanged_through_every_statement_the_pool_sends(
    engine: AsyncEngine, pool: DirectPool
) -> None:
    values = [*HOSTILE, LONG_TEXT]
    async with engine.begin() as conn:
        await conn.execute(
            insert(ApiClient.__table__),
            {"id": CLIENT, "name": "'\\", "key_hash": "h", "key_prefix": "p", "role": "client"},
        )

    # The accept path: one row per INSERT, prepared; then the same INSERT as one text query.
    prepared_ids = [_id("p", i, v) for i, v in enumerate(values)]
    text_ids = [_id("t", i, v) for i, v in enumerate(values)]
    for i, (tx_id, value) in enumerate(zip(prepared_ids, values, strict=True)):
        sql, args = pool.row(TRANSACTIONS).insert([_row(tx_id, value, i)])
        assert await pool.run(sql, args, prepare=True) == [1]
    rows = [_row(tx_id, v, i) for i, (tx_id, v) in enumerate(zip(text_ids, values, strict=True))]
    sql, args = pool.row(TRANSACTIONS).insert(rows)
    assert await pool.run(sql, args) == [len(values)]

    # The consumer's batch read: ten ids a SELECT, prepared, rows made into objects.
    loader = pool.loader(Transaction)
    batch_select = f"{loader.select} WHERE id IN ({', '.join(['%s'] * 10)})"
    loaded: dict[str, Transaction] = {}
    every_id = prepared_ids + text_ids
    for start in range(0, len(every_id), 10):
        ids = every_id[start : start + 10]
        padded = [*ids, *[ids[-1]] * (10 - len(ids))]
        found = loader.objects(await pool.fetch(batch_select, padded, prepare=True))
        loaded.update((tx.id, tx) for tx in found)
    assert sorted(loaded) == sorted(every_id)
    for i, (tx_id, value) in enumerate(zip(prepared_ids, values, strict=True)):
        assert loaded[tx_id].request == _row(tx_id, value, i)["request"]
        assert loaded[tx_id].idempotency_key == f"{tx_id}:{value}"[:255]

    def change(tx: Transaction, value: str) -> Change:
        return Change(
            tx,
            "submitted",
            source=value[:32],
            reason=value,
            values={"error": value, "hash": value[:66], "result": {value: value}},
        )

    # The group commit, the prepared rows: one joined compare-and-set UPDATE for them all.
    values_of = dict(zip(prepared_ids + text_ids, values + values, strict=True))
    async with pool.connection() as raw:
        written = await write_changes_direct(
            pool, raw, [change(loaded[i], values_of[i]) for i in prepared_ids]
        )
    assert all(columns is not None for columns in written)
    # The text rows: one of them moved on meanwhile, so the joined UPDATE finds one row too
    # few, is rolled back, and the compare-and-sets go again one statement per row.
    stale = text_ids[3]
    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE transactions SET version = version + 1 WHERE id = :id"), {"id": stale}
        )
    async with pool.connection() as raw:
        written = await write_changes_direct(
            pool, raw, [change(loaded[i], values_of[i]) for i in text_ids]
        )
    assert [columns is None for columns in written] == [i == stale for i in text_ids]

    # The publisher's mark: the ids in an IN list, a timestamp first.
    marks = ", ".join(["%s"] * len(every_id))
    enqueued = datetime(2026, 11, 26, 12, 0, 1)
    assert await pool.run(
        f"UPDATE transactions SET enqueued_at = %s WHERE id IN ({marks}) "  # noqa: S608
        "AND enqueued_at IS NULL",
        [enqueued, *every_id],
    ) == [len(every_id)]

    async with engine.connect() as conn:
        tables = {row[0] for row in await conn.execute(text("SHOW TABLES"))}
        stored = {row.id: row for row in await conn.execute(select(TRANSACTIONS))}
        events = (await conn.execute(select(TRANSACTION_EVENTS))).all()
        notifications = (await conn.execute(select(NOTIFICATIONS))).all()
    assert {"transactions", "transaction_events", "notifications"} <= tables
    assert sorted(stored) == sorted(every_id)
    for tx_id in every_id:
        value, row = values_of[tx_id], stored[tx_id]
        assert row.enqueued_at == enqueued
        assert row.callback_url == f"https://hooks.example/{value}"[:2048]
        if tx_id == stale:
            assert (row.status, row.error) == ("pending", None)
            continue
        assert (row.status, row.version) == ("submitted", 2)
        assert (row.error, row.hash, row.result) == (value, value[:66], {value: value})
    landed = [tx_id for tx_id in every_id if tx_id != stale]
    assert sorted((e.transaction_id, e.reason, e.source) for e in events) == sorted(
        (tx_id, values_of[tx_id], values_of[tx_id][:32]) for tx_id in landed
    )
    assert sorted((n.transaction_id, n.url, n.payload["hash"]) for n in notifications) == sorted(
        (tx_id, stored[tx_id].callback_url, values_of[tx_id][:66]) for tx_id in landed
    )


async def test_bytes_are_escaped_for_the_sessions_sql_mode(
    engine: AsyncEngine, pool: DirectPool
) -> None:
    # The driver escapes bytes with backslashes whatever the sql_mode: on a session that
    # reads backslashes as plain characters this closed the literal early.
    hostile = b"\\'; DROP TABLE probe; -- \x00'"
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE probe (id INT PRIMARY KEY, data BLOB)"))
    assert await pool.run(
        ["INSERT INTO probe VALUES (1, %s)", "INSERT INTO probe VALUES (2, %s)"],
        [hostile, hostile + b"\\"],
    ) == [1, 1]
    assert await pool.fetch("SELECT data FROM probe ORDER BY id") == [
        (hostile,),
        (hostile + b"\\",),
    ]
    async with pool.connection() as conn:
        (mode,) = (await direct_db.fetch(conn, "SELECT @@SESSION.sql_mode"))[0]
    assert "NO_BACKSLASH_ESCAPES" not in mode


@pytest.mark.parametrize("prepare", [False, True], ids=["text", "prepared"])
async def test_a_lone_surrogate_is_refused_before_anything_is_sent(
    engine: AsyncEngine, pool: DirectPool, prepare: bool
) -> None:
    # Not UTF-8, so not storable in utf8mb4: the driver cannot encode it, and says so.
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE probe (id INT PRIMARY KEY, name TEXT)"))
    with pytest.raises(UnicodeEncodeError):
        await pool.run("INSERT INTO probe VALUES (1, %s)", ["a\ud800b"], prepare=prepare)
    assert await pool.run("INSERT INTO probe VALUES (2, %s)", ["ok"], prepare=prepare) == [1]
    assert await pool.fetch("SELECT id, name FROM probe") == [(2, "ok")]
    assert pool.connects == 1  # the connection it was refused on is still in step, and kept
