"""The relayer pool at the consumer's scale (one consumer in this process, real SQS, MariaDB
and relayer-stub processes serving several relayers): transactions are spread over the pool
and each row records its relayer; an attempt in doubt is looked up at the relayer it went to;
an executor instance that is down takes no new work while the others carry it, and nothing is
sent twice; a jammed relayer is noticed, starved and comes back."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from consumer_testkit import (
    DEAD,
    Stub,
    rows,
    seed_rows,
    send_messages,
    set_rows,
    status_counts,
    submit_to_stub,
    wait_until,
)
from test_outages import SETTLED

from relay_core.db.models import utcnow
from relay_core.pool import RelayerState
from relay_testkit import start_stub

POOL = "relayer-1,relayer-2,relayer-3"
RETIRED = "relayer-9"  # served by the executor, no longer in Relay's pool


@pytest.fixture
def pool_stub(tmp_path: Path) -> Any:
    """A relayer-stub serving the pool's three relayers and one since taken out of it,
    moving each transaction to confirmed."""
    stub = start_stub(
        tmp_path / "pool", STUB_RELAYER_IDS=f"{POOL},{RETIRED}", STUB_LOG_LEVEL="WARNING"
    )
    try:
        yield stub
    finally:
        stub.stop()


def _sent(database_url: str) -> int:
    """Rows with their executor transaction recorded (whatever became of it since)."""
    return sum(1 for row in rows(database_url) if row["executor_tx_id"] is not None)


def _ledger_relayers(*stubs: Stub) -> dict[str, str]:
    """Every executor transaction of the stubs, and the relayer it was sent to."""
    found: dict[str, str] = {}
    for stub in stubs:
        for entry in stub.ledger()[1]:
            assert entry["id"] not in found
            found[entry["id"]] = entry["relayer_id"]
    return found


async def test_transactions_are_spread_over_the_pool_and_each_row_names_its_relayer(
    database_url: str, sqs: Any, queues: tuple[str, str], pool_stub: Stub, run_consumer: Any
) -> None:
    ids = seed_rows(database_url, 60)
    await send_messages(sqs, queues[0], ids)
    consumer = await run_consumer(executor_url=pool_stub.base_url, executor_relayers=POOL)
    await wait_until(lambda: _sent(database_url) == 60, 60, "every row sent")
    sent = _ledger_relayers(pool_stub)
    assert len(sent) == 60, "each transaction once"
    per_relayer = Counter(row["relayer"] for row in rows(database_url))
    assert set(per_relayer) == {"relayer-1", "relayer-2", "relayer-3"}, per_relayer
    assert min(per_relayer.values()) >= 10, f"least in flight first: {per_relayer}"
    for row in rows(database_url):
        assert sent[row["executor_tx_id"]] == row["relayer"]
    assert consumer.pool.closed


@pytest.mark.parametrize("relayer", ["relayer-3", RETIRED])
async def test_an_attempt_in_doubt_is_looked_up_at_the_relayer_it_went_to(
    database_url: str,
    sqs: Any,
    queues: tuple[str, str],
    pool_stub: Stub,
    run_consumer: Any,
    relayer: str,
) -> None:
    """The earlier attempt reached ``relayer`` (in the pool, or since taken out of it);
    relayer-1 (the default) has nothing of it. Looking at the wrong relayer would find
    nothing and send it again."""
    (tx_id,) = seed_rows(database_url, 1)  # its request is to DEAD, data 0x00000000
    stamp = utcnow() - SETTLED
    set_rows(
        database_url,
        [tx_id],
        status="processing",
        attempts=1,
        submit_started_at=stamp,
        first_attempt_at=stamp,
        claimed_at=stamp,
        relayer=relayer,
    )
    (reached,) = submit_to_stub(
        pool_stub, [{"to": DEAD, "data": "0x00000000", "value": "0"}], relayer=relayer
    )
    await send_messages(sqs, queues[0], [tx_id])
    await run_consumer(executor_url=pool_stub.base_url, executor_relayers=POOL)
    await wait_until(lambda: status_counts(database_url) == {"submitted": 1}, 60, "adopted")
    (row,) = rows(database_url)
    assert (row["executor_tx_id"], row["relayer"]) == (reached, relayer)
    assert pool_stub.ledger_count() == 1, "sent again"


async def test_an_executor_instance_down_takes_no_new_work_and_the_pool_carries_it(
    database_url: str,
    sqs: Any,
    queues: tuple[str, str],
    pool_stub: Stub,
    run_consumer: Any,
    tmp_path: Path,
) -> None:
    """relayer-1 and relayer-2 on one instance, relayer-3 on another that is down: its
    circuit opens, the others take everything, nothing is sent twice; back, it takes work
    again."""
    other = start_stub(tmp_path / "other", STUB_RELAYER_IDS="relayer-3", STUB_LOG_LEVEL="WARNING")
    other.kill()
    pool = json.dumps(
        [
            {"id": "relayer-1", "url": pool_stub.base_url},
            {"id": "relayer-2", "url": pool_stub.base_url},
            {"id": "relayer-3", "url": other.base_url},
        ]
    )
    ids = seed_rows(database_url, 40)
    await send_messages(sqs, queues[0], ids)
    consumer = await run_consumer(executor_relayers=pool)
    await wait_until(lambda: _sent(database_url) == 40, 60, "all sent")
    member = consumer.pool.members["relayer-3"]
    assert member.breaker.opened >= 1
    assert member.state is RelayerState.open
    assert consumer.pool.closed, "the others take work"
    sent = _ledger_relayers(pool_stub)
    assert len(sent) == 40
    assert set(sent.values()) == {"relayer-1", "relayer-2"}
    assert {row["relayer"] for row in rows(database_url)} == {"relayer-1", "relayer-2"}

    other.start()
    try:
        await wait_until(lambda: member.breaker.closed, 30, "relayer-3's circuit to close")
        more = seed_rows(database_url, 30)
        await send_messages(sqs, queues[0], more)
        await wait_until(lambda: _sent(database_url) == 70, 60, "70 sent")
        sent = _ledger_relayers(pool_stub, other)
        assert len(sent) == 70
        assert "relayer-3" in set(sent.values()), "back, it takes work again"
        for row in rows(database_url):
            assert sent[row["executor_tx_id"]] == row["relayer"]
    finally:
        other.stop()


def _report(database_url: str, relayer: str) -> dict[str, Any] | None:
    from consumer_testkit import sync_engine
    from sqlalchemy import select

    from relay_core.db.models import RelayerReport

    engine = sync_engine(database_url)
    with engine.connect() as conn:
        found = conn.execute(select(RelayerReport).where(RelayerReport.relayer == relayer)).first()
    engine.dispose()
    return None if found is None else dict(found._mapping)


async def test_a_jammed_relayer_is_noticed_starved_and_comes_back_when_it_mines_again(
    database_url: str, sqs: Any, queues: tuple[str, str], pool_stub: Stub, run_consumer: Any
) -> None:
    """relayer-2 accepts and never mines (the stub's jam): within the jam limit it is
    ``jammed`` and takes no new work; what it holds stays with it (never sent elsewhere);
    lifted, it mines, is ``ok`` again and everything is confirmed once."""
    import httpx

    def jam(relayers: list[str]) -> None:
        with httpx.Client(base_url=pool_stub.base_url, timeout=10) as http:
            http.patch("/__admin/faults", json={"jam_relayers": relayers}).raise_for_status()

    jam(["relayer-2"])
    first = seed_rows(database_url, 30)
    await send_messages(sqs, queues[0], first)
    consumer = await run_consumer(
        executor_url=pool_stub.base_url,
        executor_relayers=POOL,
        relayer_jam_after_s=4,
        relayer_watch_interval_s=0.5,
        tracker_stale_s=1,
        tracker_interval_s=0.5,
    )
    member = consumer.pool.members["relayer-2"]
    await wait_until(lambda: member.state is RelayerState.jammed, 30, "relayer-2 jammed")
    await wait_until(
        lambda: (_report(database_url, "relayer-2") or {}).get("state") == "jammed",
        10,
        "the jam in the pool view",
    )
    held = {row["id"] for row in rows(database_url) if row["relayer"] == "relayer-2"}
    assert held, "relayer-2 took some of the first batch before it was found jammed"

    more = seed_rows(database_url, 30)
    await send_messages(sqs, queues[0], more)
    await wait_until(lambda: _sent(database_url) == 60, 60, "all sent")
    now_on_2 = {row["id"] for row in rows(database_url) if row["relayer"] == "relayer-2"}
    assert now_on_2 == held, "a jammed relayer was given new work"
    assert all(row["status"] == "submitted" for row in rows(database_url) if row["id"] in held), (
        "what it holds stays with it"
    )

    jam([])
    await wait_until(lambda: member.state is RelayerState.ok, 30, "relayer-2 back")
    await wait_until(
        lambda: status_counts(database_url) == {"confirmed": 60}, 60, "every one confirmed"
    )
    sent = _ledger_relayers(pool_stub)
    assert len(sent) == 60, "nothing sent twice"
    for row in rows(database_url):
        assert sent[row["executor_tx_id"]] == row["relayer"]


async def test_rows_behind_the_executor_do_not_make_a_relayer_jammed(
    database_url: str, sqs: Any, queues: tuple[str, str], pool_stub: Stub, run_consumer: Any
) -> None:
    """Relay's rows say submitted for minutes (no webhooks, the tracker off: as during an
    executor outage, when the tracker waits), but the executor has mined them: the watch asks
    it before calling the relayer jammed, and it is not."""
    executor_ids = submit_to_stub(
        pool_stub, [{"to": DEAD, "data": f"0x{i:08x}", "value": "0"} for i in range(5)]
    )
    ids = seed_rows(database_url, 5)
    long_ago = utcnow() - SETTLED * 4
    for tx_id, executor_id in zip(ids, executor_ids, strict=True):
        set_rows(
            database_url,
            [tx_id],
            status="submitted",
            executor_tx_id=executor_id,
            relayer="relayer-1",
            submitted_at=long_ago,
            attempts=1,
        )
    await wait_until(
        lambda: {e["status"] for e in pool_stub.ledger()[1]} == {"confirmed"}, 30, "mined"
    )
    consumer = await run_consumer(
        executor_url=pool_stub.base_url,
        executor_relayers=POOL,
        relayer_jam_after_s=2,
        relayer_watch_interval_s=0.5,
        tracker_enabled=False,
    )
    member = consumer.pool.members["relayer-1"]
    await wait_until(lambda: member.held.count == 5, 10, "the watch to count them")
    await asyncio.sleep(3)  # several passes past the limit
    assert member.state is RelayerState.ok, member.detail
    assert status_counts(database_url) == {"submitted": 5}, "the rows were indeed behind"
