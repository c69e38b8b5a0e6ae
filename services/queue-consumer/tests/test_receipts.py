"""What a transaction cost, from its receipt: every transaction that reached the chain gets its
block, gas used, price and fee once the chain has its receipt, reservation or not; Redis shows
it at once; a client whose callback reported the final status first is told the cost after."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from consumer_testkit import rows, seed_rows, set_rows, sync_engine
from sqlalchemy import select

from queue_consumer.tracking.receipts import RECEIPT_PATIENCE, FeeSettler
from relay_core.cache import StatusCache, connect
from relay_core.db.engine import create_engine, create_sessionmaker
from relay_core.db.models import Notification, Transaction, utcnow
from relay_core.db.transitions import transition
from relay_core.settings import InfraSettings
from relay_wire.direct import DirectPool

CALLBACK = "https://hooks.example.com/relay"


class _Chain:
    """A chain with a receipt for the hashes in ``mined`` (21,000 gas at 1.5 gwei, in block
    0x10, as a node answers: quantities in 0x hex); it remembers what it was asked."""

    def __init__(self, *mined: str) -> None:
        self.mined = set(mined)
        self.asked: list[str] = []
        self.batches = 0  # JSON-RPC batches asked

    async def receipt(self, tx_hash: str) -> dict[str, Any] | None:
        self.asked.append(tx_hash)
        if tx_hash not in self.mined:
            return None
        return {
            "transactionHash": tx_hash,
            "blockNumber": "0x10",
            "gasUsed": hex(21_000),
            "effectiveGasPrice": hex(1_500_000_000),
            "status": "0x1",
        }

    async def receipts(self, tx_hashes: list[str]) -> list[dict[str, Any] | None]:
        self.batches += 1
        return [await self.receipt(tx_hash) for tx_hash in tx_hashes]


def _hash(n: int) -> str:
    return f"0x{n:064x}"


@pytest.fixture
async def sessions(database_url: str) -> AsyncIterator[Any]:
    engine = create_engine(InfraSettings(database_url=database_url))
    try:
        yield create_sessionmaker(engine)
    finally:
        await engine.dispose()


@pytest.fixture(params=["sqlalchemy", "direct"])
async def direct(request: Any, database_url: str) -> AsyncIterator[DirectPool | None]:
    """The pass's reads and writes through the ORM, or on driver connections."""
    if request.param == "sqlalchemy":
        yield None
        return
    engine = create_engine(InfraSettings(database_url=database_url))
    pool = DirectPool.create(engine, size=2, timeout_s=5.0)
    try:
        yield pool
    finally:
        await pool.close()
        await engine.dispose()


@pytest.fixture
async def cache(infra_env: dict[str, Any]) -> AsyncIterator[StatusCache]:
    redis = connect(infra_env["redis_url"], 2.0)
    try:
        yield StatusCache(redis, infra_env["redis_prefix"])
    finally:
        await redis.aclose()


def _notifications(database_url: str) -> list[dict[str, Any]]:
    engine = sync_engine(database_url)
    with engine.connect() as conn:
        found = [
            dict(r._mapping) for r in conn.execute(select(Notification).order_by(Notification.id))
        ]
    engine.dispose()
    return found


async def test_a_confirmed_transaction_without_a_reservation_gets_its_cost_from_its_receipt(
    database_url: str, sessions: Any, cache: StatusCache, direct: DirectPool | None
) -> None:
    confirmed, reverted, refused, on_its_way = seed_rows(database_url, 4)
    set_rows(database_url, [confirmed], status="confirmed", hash=_hash(1), executor_tx_id="x-1")
    set_rows(database_url, [reverted], status="failed", hash=_hash(2), executor_tx_id="x-2")
    set_rows(database_url, [refused], status="failed", error="refused before submission")
    set_rows(database_url, [on_its_way], status="submitted", hash=_hash(4), executor_tx_id="x-4")
    chain = _Chain(_hash(1), _hash(2), _hash(4))

    # Without a chain to ask, nothing is written.
    assert await FeeSettler(sessions, None, cache).run_once() == 0
    assert all(r["fee_wei"] is None for r in rows(database_url))

    settler = FeeSettler(sessions, chain, cache, direct=direct)  # type: ignore[arg-type]
    assert await settler.run_once() == 2
    assert chain.batches == 1  # both receipts in one JSON-RPC batch
    assert await settler.run_once() == 0  # once
    by_id = {r["id"]: r for r in rows(database_url)}
    for tx_id in (confirmed, reverted):  # a reverted call used gas too
        row = by_id[tx_id]
        assert (row["block_number"], row["gas_used"]) == (16, 21_000)
        assert (row["effective_gas_price"], row["fee_wei"]) == ("1500000000", "31500000000000")
        assert row["fee_settled_at"] is not None
        assert row["reserved_fee_wei"] is None
    for tx_id in (refused, on_its_way):  # never reached the chain; not mined yet
        row = by_id[tx_id]
        assert [row[c] for c in ("block_number", "gas_used", "fee_wei")] == [None] * 3
    assert sorted(set(chain.asked)) == [_hash(1), _hash(2)]
    # Redis was written through: a status read shows the cost at once.
    cached = await cache.get(confirmed)
    assert cached is not None
    version, entry = cached
    assert version == by_id[confirmed]["version"]
    assert (entry["blockNumber"], entry["gasUsed"]) == (16, 21_000)
    assert (entry["effectiveGasPrice"], entry["feeWei"]) == ("1500000000", "31500000000000")


async def test_rows_the_chain_has_no_receipt_for_yet_wait_without_holding_up_the_others(
    database_url: str, sessions: Any, direct: DirectPool | None
) -> None:
    """Batches of two walk the rows in turn: three older rows the chain has no receipt for do
    not keep a newer one waiting; they get theirs on a later pass, once the chain has it. A
    row last changed longer ago than the patience is not asked for any more."""
    *unmined, newer, forgotten = seed_rows(database_url, 5)
    now = utcnow()
    for n, tx_id in enumerate([*unmined, newer]):
        set_rows(
            database_url,
            [tx_id],
            status="confirmed",
            hash=_hash(n),
            executor_tx_id=f"x-{n}",
            updated_at=now - timedelta(minutes=10 - n),
        )
    set_rows(
        database_url,
        [forgotten],
        status="confirmed",
        hash=_hash(9),
        executor_tx_id="x-9",
        updated_at=now - RECEIPT_PATIENCE - timedelta(minutes=1),
    )
    chain = _Chain(_hash(3), _hash(9))
    settler = FeeSettler(sessions, chain, batch=2, direct=direct)  # type: ignore[arg-type]
    recorded = [await settler.run_once() for _ in range(3)]
    assert sum(recorded) == 1, recorded
    by_id = {r["id"]: r for r in rows(database_url)}
    assert by_id[newer]["fee_wei"] == "31500000000000"
    assert all(by_id[tx_id]["fee_wei"] is None for tx_id in unmined)
    assert _hash(9) not in chain.asked
    assert by_id[forgotten]["fee_wei"] is None

    chain.mined.update({_hash(0), _hash(1), _hash(2)})  # mined since
    recorded = [await settler.run_once() for _ in range(3)]
    assert sum(recorded) == 3, recorded
    assert all(r["fee_wei"] == "31500000000000" for r in rows(database_url) if r["id"] != forgotten)


async def test_a_cost_read_after_the_final_status_is_reported_to_the_callback_once(
    database_url: str, sessions: Any, direct: DirectPool | None
) -> None:
    """A confirmed row's callback went without the cost: one ``transaction.cost_recorded``
    follows, written with the cost. A row still mined reports it with its next status."""
    final, mined, no_callback = seed_rows(database_url, 3)
    for n, tx_id in enumerate((final, mined, no_callback)):
        set_rows(database_url, [tx_id], hash=_hash(n), executor_tx_id=f"x-{n}")
    set_rows(database_url, [final, mined], callback_url=CALLBACK)
    set_rows(database_url, [final, no_callback], status="confirmed")
    set_rows(database_url, [mined], status="mined")
    chain = _Chain(_hash(0), _hash(1), _hash(2))
    settler = FeeSettler(sessions, chain, direct=direct)  # type: ignore[arg-type]
    assert await settler.run_once() == 3
    assert await settler.run_once() == 0

    (reported,) = _notifications(database_url)
    row = next(r for r in rows(database_url) if r["id"] == final)
    assert reported["transaction_id"] == final
    assert reported["url"] == CALLBACK
    assert reported["state"] == "pending"
    assert reported["payload"] == {
        "event": "transaction.cost_recorded",
        "transactionId": final,
        "status": "confirmed",
        "hash": _hash(0),
        "blockNumber": 16,
        "gasUsed": 21_000,
        "effectiveGasPrice": "1500000000",
        "feeWei": "31500000000000",
        "timestamp": row["updated_at"].isoformat(timespec="milliseconds") + "Z",
    }

    # The mined one's confirmation carries what it cost.
    async with sessions() as session, session.begin():
        tx = await session.get(Transaction, mined)
        assert tx is not None
        assert await transition(session, tx, "confirmed", source="test")
    changed = _notifications(database_url)[-1]["payload"]
    assert (changed["event"], changed["transactionId"]) == ("transaction.status_changed", mined)
    assert (changed["blockNumber"], changed["gasUsed"]) == (16, 21_000)
    assert (changed["effectiveGasPrice"], changed["feeWei"]) == ("1500000000", "31500000000000")
