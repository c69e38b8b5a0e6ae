"""Status to the end without webhooks: the tracker polls the executor; client notifications
are delivered signed, in order, and survive a failing endpoint."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import pytest
from consumer_testkit import (
    Stub,
    rows,
    seed_rows,
    status_counts,
    sync_engine,
    twenty_good_five_failing,
    wait_until,
)
from sqlalchemy import select, update
from standardwebhooks.webhooks import Webhook

from queue_consumer.notifications.service import Notifier
from queue_consumer.tracking.service import Tracker
from queue_consumer.transactions.group_commit import GroupCommit
from relay_core import apikeys
from relay_core.db.engine import create_engine, create_sessionmaker
from relay_core.db.models import ApiClient, Notification, Transaction, TransactionEvent
from relay_core.db.transitions import transition
from relay_core.netguard import AddressPolicy
from relay_core.settings import InfraSettings
from relay_wire.direct import DirectPool


async def test_with_webhooks_off_the_tracker_alone_brings_every_transaction_to_its_end(
    database_url: str, sqs: Any, queues: tuple[str, str], stub: Stub, run_consumer: Any
) -> None:
    good, bad = await twenty_good_five_failing(database_url, stub, sqs, queues[0])
    # The tracker alone: the follower off (test_follow.py has it on, the tracker's at 15 s).
    await run_consumer(tracker_interval_s=0.2, tracker_stale_s=0.5, tracker_follow_interval_s=0)
    await wait_until(
        lambda: status_counts(database_url) == {"confirmed": 20, "failed": 5}, 60, "all final"
    )
    by_id = {r["id"]: r for r in rows(database_url)}
    for tx_id in good:
        assert by_id[tx_id]["hash"].startswith("0x")
        assert by_id[tx_id]["confirmed_at"] is not None
    for tx_id in bad:
        assert by_id[tx_id]["error"]


class _Executor:
    """An executor that says every transaction is confirmed; asked about ``moves``, it first
    moves that row on (a webhook landing while the tracker waits for the answer)."""

    def __init__(self, database_url: str, moves: str) -> None:
        self.database_url, self.moves, self.asked = database_url, moves, 0

    @contextlib.asynccontextmanager
    async def slot(self, counted: bool = True) -> AsyncIterator[None]:
        yield

    async def get(self, executor_id: str) -> Any:
        self.asked += 1
        if executor_id == f"ex-{self.moves}":
            engine = sync_engine(self.database_url)
            with engine.begin() as conn:
                conn.execute(
                    update(Transaction)
                    .where(Transaction.id == self.moves)
                    .values(version=Transaction.version + 1, status="mined")
                )
            engine.dispose()
        return SimpleNamespace(
            raw={"id": executor_id, "status": "confirmed", "hash": "0x" + "ab" * 32}
        )


@pytest.mark.parametrize("driver", ["sqlalchemy", "direct"])
async def test_a_tracker_pass_reads_in_one_query_and_decides_again_for_a_row_that_moved(
    database_url: str, driver: str
) -> None:
    ids = seed_rows(database_url, 6)
    engine = sync_engine(database_url)
    with engine.begin() as conn:
        for tx_id in ids:  # submitted, never heard of since: all due
            conn.execute(
                update(Transaction)
                .where(Transaction.id == tx_id)
                .values(status="submitted", executor_tx_id=f"ex-{tx_id}", version=2)
            )
    engine.dispose()
    executor = _Executor(database_url, moves=ids[0])
    member = SimpleNamespace(guard=executor, client=executor)
    pool = SimpleNamespace(breakers=[SimpleNamespace(closed=True)], member=lambda _r: member)
    async_engine = create_engine(InfraSettings(database_url=database_url))
    direct = DirectPool.create(async_engine, size=2, timeout_s=5.0) if driver == "direct" else None
    try:
        sessions = create_sessionmaker(async_engine)
        writes = GroupCommit(async_engine, None, direct=direct)
        tracker = Tracker(
            sessions,
            pool,  # type: ignore[arg-type]
            writes,
            direct=direct,
            stale_after_s=15,
            batch=100,
            concurrency=4,
        )
        assert await tracker.run_once() == 6
        assert await tracker.run_once() == 0  # heard of now: not due for 15 s
    finally:
        if direct is not None:
            await direct.close()
        await async_engine.dispose()
    assert executor.asked == 6
    by_id = {r["id"]: r for r in rows(database_url)}
    assert {by_id[i]["status"] for i in ids} == {"confirmed"}
    assert by_id[ids[0]]["version"] == 4  # moved to mined under the tracker, then confirmed
    engine = sync_engine(database_url)
    with engine.connect() as conn:
        sources = conn.execute(
            select(TransactionEvent.source).where(TransactionEvent.transaction_id == ids[0])
        ).scalars()
        assert list(sources) == ["tracker"]
    engine.dispose()


class _Receiver(BaseHTTPRequestHandler):
    fail_first = 0
    received: list[tuple[dict[str, str], bytes, int]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        status = 500 if len(self.received) < self.fail_first else 200
        self.received.append((dict(self.headers), body, status))
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[str, type[_Receiver]]]:
    handler = type("Receiver", (_Receiver,), {"received": [], "fail_first": 0})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/hooks", handler
    finally:
        server.shutdown()


def _verify(secret: str, headers: dict[str, str], body: bytes) -> None:
    """As a client verifies: with the Standard Webhooks library, not our own code."""
    Webhook(secret).verify(body, headers)


@pytest.mark.parametrize("driver", ["sqlalchemy", "direct"])
async def test_client_callbacks_are_signed_in_order_and_survive_a_failing_endpoint(
    database_url: str, receiver: tuple[str, type[_Receiver]], driver: str
) -> None:
    url, handler = receiver
    handler.fail_first = 3  # the endpoint is down for a while
    secret = apikeys.generate_callback_secret()
    ids = seed_rows(database_url, 2)
    engine_sync = sync_engine(database_url)
    with engine_sync.begin() as conn:
        conn.execute(update(ApiClient).values(callback_url=url, callback_secret=secret))
        conn.execute(update(Transaction).values(callback_url=url))
    engine_sync.dispose()

    engine = create_engine(InfraSettings(database_url=database_url))
    sessions = create_sessionmaker(engine)
    path = ["processing", "submitted", "mined", "confirmed"]
    for status in path:  # the status changes, as the consumer and tracker would make them
        for tx_id in ids:
            async with sessions() as session, session.begin():
                tx = await session.get(Transaction, tx_id)
                assert tx is not None
                assert await transition(session, tx, status, source="test", hash="0xabc")

    # With a driver connection, a pass first asks whether anything is due at all.
    direct = DirectPool.create(engine, size=2, timeout_s=5.0) if driver == "direct" else None
    notifier = Notifier(
        sessions,
        timeout_s=2,
        concurrency=4,
        max_age_s=600,
        backoff_cap_s=0.2,
        policy=AddressPolicy(allow_loopback=True),  # the receiver is on 127.0.0.1
        direct=direct,
    )
    try:

        async def all_delivered() -> bool:
            await notifier.run_once()
            async with sessions() as session:
                pending = (
                    await session.execute(
                        Notification.__table__.select().where(Notification.state != "delivered")
                    )
                ).all()
            return not pending

        await wait_until(all_delivered, 30, "every notification delivered")
    finally:
        await notifier.aclose()
        if direct is not None:
            await direct.close()
        await engine.dispose()

    attempts = handler.received
    assert len(attempts) == 2 * len(path) + 3  # once per attempt: 8 deliveries + 3 failures
    position = dict.fromkeys(ids, 0)
    for headers, body, status in attempts:
        _verify(secret, headers, body)
        payload = json.loads(body)
        assert set(payload) == {
            *("event", "transactionId", "status", "hash", "timestamp"),
            *("blockNumber", "gasUsed", "effectiveGasPrice", "feeWei"),
        }
        assert payload["feeWei"] is None  # no receipt read here
        tx_id = payload["transactionId"]
        # In order per transaction: a change is retried until delivered, and nothing later
        # for that transaction is sent meanwhile.
        assert payload["status"] == path[position[tx_id]]
        if status == 200:
            position[tx_id] += 1
    assert position == dict.fromkeys(ids, len(path))  # each change delivered exactly once
