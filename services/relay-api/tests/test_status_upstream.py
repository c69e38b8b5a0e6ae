"""Status tier 3 (the executor) and the cache's ordering guarantee under races."""

from __future__ import annotations

import asyncio
import random
import uuid
from pathlib import Path
from typing import Any

import httpx
from api_testkit import DEAD
from sqlalchemy import update

from relay_api.app import create_app
from relay_api.auth.service import Caller
from relay_api.relay import service
from relay_api.runtime import Runtime
from relay_core.db.models import Transaction
from relay_core.db.transitions import touch
from relay_core.executor import ExecutorClient
from relay_testkit import STUB_DEV_KEY, start_stub


async def _submitted_at_executor(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str, stub_url: str
) -> str:
    """Accept a transaction, then do what the consumer does: submit it and record the id."""
    accepted = await client.post(
        "/api/v1/relay/direct", json={"to": DEAD}, headers={"X-API-Key": api_key}
    )
    tx_id = accepted.json()["transactionId"]
    executor = ExecutorClient(stub_url, STUB_DEV_KEY, "relayer-1")
    created = await executor.submit({"to": DEAD, "data": "0x", "value": "0", "speed": "fast"})
    await executor.aclose()
    async with runtime.sessions() as session, session.begin():
        await session.execute(
            update(Transaction)
            .where(Transaction.id == tx_id)
            .values(status="submitted", executor_tx_id=created.id, version=Transaction.version + 1)
        )
    return str(tx_id)


async def test_executor_down_still_answers_from_mysql_and_refreshes_when_back(
    api_settings: Any, queues: Any, api_key: str, tmp_path: Path
) -> None:
    stub = start_stub(tmp_path)
    stub.lifecycle(paused=True)
    settings = api_settings.model_copy(
        update={
            "executor_url": stub.base_url,
            "redis_url": None,
            "status_refresh_after_s": 0,
            "status_upstream_timeout_s": 1.0,
        }
    )
    app = create_app(settings)
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                runtime: Runtime = app.state.runtime
                tx_id = await _submitted_at_executor(client, runtime, api_key, stub.base_url)
                path = f"/api/v1/relay/status/{tx_id}"
                headers = {"X-API-Key": api_key}

                stub.kill()
                down = await client.get(path, headers=headers)
                assert down.status_code == 200
                assert down.headers["x-cache"] == "miss"
                assert down.json()["status"] == "submitted"

                stub.start()  # the same ledger: the executor still knows the transaction
                stub.lifecycle(
                    paused=False,
                    delay_sent_ms=0,
                    delay_submitted_ms=0,
                    delay_mined_ms=0,
                    delay_confirmed_ms=0,
                )
                # (within a second or so; the bound is for a loaded machine, where the
                # restarted stub can take a while to answer)
                for _ in range(300):
                    back = await client.get(path, headers=headers)
                    assert back.status_code == 200
                    if back.json()["status"] == "confirmed":
                        break
                    await asyncio.sleep(0.1)
                assert back.json()["status"] == "confirmed", back.json()
                assert back.headers["x-cache"] == "upstream"
                assert back.json()["hash"].startswith("0x")
                assert back.json()["confirmedAt"] is not None
                # Final now: no more executor calls for it.
                async with runtime.sessions() as session:
                    final = await session.get(Transaction, tx_id)
                    assert final is not None
                    assert not runtime.refresher.due(final)
    finally:
        stub.stop()


async def test_unknown_id_is_looked_up_at_the_executor_for_admins_only(
    api_settings: Any, queues: Any, new_key: Any, tmp_path: Path
) -> None:
    stub = start_stub(tmp_path)
    app = create_app(api_settings.model_copy(update={"executor_url": stub.base_url}))
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                executor = ExecutorClient(stub.base_url, STUB_DEV_KEY, "relayer-1")
                created = await executor.submit({"to": DEAD, "value": "0", "speed": "fast"})
                await executor.aclose()
                path = f"/api/v1/relay/status/{created.id}"
                admin = await new_key("ops", admin=True)
                user = await new_key("user")
                assert (await client.get(path, headers={"X-API-Key": user})).status_code == 404
                found = await client.get(path, headers={"X-API-Key": admin})
                assert found.status_code == 200
                assert found.headers["x-cache"] == "upstream"
                assert found.json()["transactionId"] == created.id
    finally:
        stub.stop()


async def test_a_reader_backfilling_an_old_version_never_leaves_redis_older_than_mysql(
    client: httpx.AsyncClient, runtime: Runtime, api_key: str
) -> None:
    """Readers (MySQL read → backfill) race writers (commit → write-through) on one row."""
    accepted = await client.post(
        "/api/v1/relay/direct", json={"to": DEAD}, headers={"X-API-Key": api_key}
    )
    tx_id = accepted.json()["transactionId"]
    cache = runtime.cache
    assert cache is not None
    async with runtime.sessions() as session:
        owner = (await session.get(Transaction, tx_id)).client_id  # type: ignore[union-attr]
    caller = Caller(id=owner, name="acme", role="client")
    rng = random.Random(7)

    async def reader() -> None:
        for _ in range(40):
            await runtime.redis.delete(cache.key(tx_id))  # force the MySQL path
            async with runtime.sessions() as session:
                tx = await session.get(Transaction, tx_id)
                assert tx is not None
                await asyncio.sleep(rng.random() * 0.01)  # a writer commits meanwhile
                await service.status(session, cache, None, caller, tx_id)

    async def writer() -> None:
        for _ in range(40):
            async with runtime.sessions() as session, session.begin():
                tx = await session.get(Transaction, tx_id)
                assert tx is not None
                await touch(session, tx, last_synced_at=None)
            await asyncio.sleep(rng.random() * 0.01)
            await cache.put_quietly(tx.id, tx.version, {"clientId": owner}, terminal=False)
            cached = await cache.get(tx_id)
            # Whatever the readers did, the entry is never older than what was committed.
            assert cached is None or cached[0] >= tx.version

    await asyncio.gather(reader(), reader(), writer(), writer())
    async with runtime.sessions() as session:
        final = await session.get(Transaction, tx_id)
        assert final is not None
    cached = await cache.get(tx_id)
    assert cached is not None
    assert cached[0] == final.version


async def test_list_returns_own_transactions_newest_first_with_a_cursor(
    client: httpx.AsyncClient, runtime: Runtime, new_key: Any
) -> None:
    mine, theirs = await new_key("mine"), await new_key("theirs")
    ids = []
    for i in range(7):
        response = await client.post(
            "/api/v1/relay/direct", json={"to": DEAD, "value": str(i)}, headers={"X-API-Key": mine}
        )
        ids.append(response.json()["transactionId"])
    await client.post("/api/v1/relay/direct", json={"to": DEAD}, headers={"X-API-Key": theirs})
    async with runtime.sessions() as session, session.begin():
        await session.execute(
            update(Transaction).where(Transaction.id == ids[0]).values(status="failed")
        )

    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 3}
        if cursor:
            params["cursor"] = cursor
        page = (
            await client.get(
                "/api/v1/relay/transactions", params=params, headers={"X-API-Key": mine}
            )
        ).json()
        seen += [item["transactionId"] for item in page["items"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == list(reversed(ids))
    failed = await client.get(
        "/api/v1/relay/transactions", params={"status": "failed"}, headers={"X-API-Key": mine}
    )
    assert [i["transactionId"] for i in failed.json()["items"]] == [ids[0]]
    bad = await client.get(
        "/api/v1/relay/transactions", params={"cursor": "zz"}, headers={"X-API-Key": mine}
    )
    assert bad.status_code == 400
    assert "cursor" in bad.json()["detail"]
    assert (await client.get("/api/v1/relay/transactions")).status_code == 401
    assert uuid.UUID(seen[0])
